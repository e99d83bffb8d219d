"""``serve-app cluster``: RayService status and readiness through the Kubernetes API."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayservices"


@dataclass
class DeploymentState:
    name: str
    status: str
    message: str = ""


@dataclass
class ApplicationState:
    name: str
    status: str
    message: str = ""
    deployments: list[DeploymentState] = field(default_factory=list)


@dataclass
class RayServiceState:
    name: str
    namespace: str
    service_status: str
    conditions: dict[str, dict[str, str]]
    active_cluster: str
    pending_cluster: str
    serve_endpoints: int
    applications: list[ApplicationState]

    @property
    def ready(self) -> bool:
        """Ready condition true, no upgrade pending, every app RUNNING, every deployment HEALTHY."""
        ready = self.conditions.get("Ready", {}).get("status") == "True"
        upgrading = self.conditions.get("UpgradeInProgress", {}).get("status") == "True"
        apps_ok = bool(self.applications) and all(
            a.status == "RUNNING" and all(d.status == "HEALTHY" for d in a.deployments)
            for a in self.applications
        )
        return ready and not upgrading and apps_ok

    @property
    def gave_up(self) -> bool:
        """KubeRay's initializing timeout (the chart's ray.io/initializing-timeout) expired: a
        terminal state in which KubeRay deletes the cluster and stops reconciling; only
        deleting and re-creating the RayService starts over."""
        ready = self.conditions.get("Ready", {})
        return ready.get("status") == "False" and ready.get("reason") == "InitializingTimeout"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "ready": self.ready,
            "gave_up": self.gave_up,
            "service_status": self.service_status,
            "conditions": self.conditions,
            "active_cluster": self.active_cluster,
            "pending_cluster": self.pending_cluster,
            "serve_endpoints": self.serve_endpoints,
            "applications": [
                {
                    "name": a.name,
                    "status": a.status,
                    "message": a.message,
                    "deployments": {
                        d.name: {"status": d.status, "message": d.message} for d in a.deployments
                    },
                }
                for a in self.applications
            ],
        }


def parse_rayservice(obj: dict[str, Any]) -> RayServiceState:
    meta, status = obj.get("metadata", {}), obj.get("status") or {}
    active = status.get("activeServiceStatus") or {}
    pending = status.get("pendingServiceStatus") or {}
    applications = []
    for app_name, app in sorted((active.get("applicationStatuses") or {}).items()):
        deployments = [
            DeploymentState(name, d.get("status", "UNKNOWN"), d.get("message", ""))
            for name, d in sorted((app.get("serveDeploymentStatuses") or {}).items())
        ]
        applications.append(
            ApplicationState(
                app_name, app.get("status", "UNKNOWN"), app.get("message", ""), deployments
            )
        )
    conditions = {
        c["type"]: {
            "status": c.get("status", ""),
            "reason": c.get("reason", ""),
            "message": c.get("message", ""),
        }
        for c in status.get("conditions") or []
    }
    return RayServiceState(
        name=meta.get("name", ""),
        namespace=meta.get("namespace", ""),
        service_status=status.get("serviceStatus", ""),
        conditions=conditions,
        active_cluster=active.get("rayClusterName", ""),
        pending_cluster=pending.get("rayClusterName", ""),
        serve_endpoints=int(status.get("numServeEndpoints") or 0),
        applications=applications,
    )


def custom_objects_api(kubeconfig: str | None = None, context: str | None = None):
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig, context=context)
    return client.CustomObjectsApi()


def fetch_state(api: Any, name: str, namespace: str) -> RayServiceState:
    obj = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return parse_rayservice(obj)


def wait_ready(
    api: Any, name: str, namespace: str, timeout_s: float, interval_s: float = 5.0
) -> RayServiceState:
    """Poll until ready, until KubeRay gives up (its initializing timeout), or ``timeout_s``;
    returns the last state seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = fetch_state(api, name, namespace)
        if state.ready or state.gave_up or time.monotonic() >= deadline:
            return state
        time.sleep(min(interval_s, max(0.0, deadline - time.monotonic())))


def format_state(state: RayServiceState) -> str:
    verdict = "READY" if state.ready else "FAILED" if state.gave_up else "NOT READY"
    lines = [
        f"RayService {state.namespace}/{state.name}: {verdict}"
        f" (service status {state.service_status or '-'}, serve endpoints {state.serve_endpoints})",
        f"  active cluster: {state.active_cluster or '-'}   pending cluster: {state.pending_cluster or '-'}",
        "  conditions:",
    ]
    for kind, condition in state.conditions.items():
        lines.append(
            f"    {kind}={condition['status']} ({condition['reason']}) {condition['message']}".rstrip()
        )
    for app in state.applications:
        lines.append(f"  application {app.name}: {app.status} {app.message}".rstrip())
        for deployment in app.deployments:
            lines.append(
                f"    {deployment.name:<10} {deployment.status} {deployment.message}".rstrip()
            )
    if state.gave_up:
        lines.append(
            "  KubeRay gave up at its initializing timeout and deleted the Ray cluster: fix the"
            " cause (pending pods, image pull, model fetch), then delete the RayService and"
            " install again"
        )
    return "\n".join(lines)


def run(args: Any) -> int:
    from kubernetes.client.exceptions import ApiException

    try:
        return _run(args)
    except ApiException as error:
        what = f"RayService {args.namespace}/{args.name}"
        reason = "not found" if error.status == 404 else f"{error.reason}"
        print(f"error: {what}: {reason} (HTTP {error.status})", file=sys.stderr)
        return 2


def _run(args: Any) -> int:
    api = custom_objects_api(args.kubeconfig, args.context)
    if args.cluster_command == "status":
        state = fetch_state(api, args.name, args.namespace)
        print(json.dumps(state.to_dict(), indent=2) if args.json else format_state(state))
        return 0
    state = wait_ready(api, args.name, args.namespace, args.timeout, args.interval)
    print(format_state(state))
    return 0 if state.ready else 1
