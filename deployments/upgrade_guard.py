"""The chart's upgrade guard, run by its ``pre-upgrade,pre-rollback`` hook Job:
``python -m deployments.upgrade_guard``.

Under ``upgradeStrategy: None`` (the embedded store) KubeRay v1.7.0 neither updates nor
replaces a running RayCluster whose pod spec changed: it submits the new serveConfigV2 to the
old pods. The guard compares the spec this release renders with the one the **active
RayCluster** was created from. KubeRay copies the RayService's annotations onto each RayCluster
it creates (``constructRayClusterForRayService``), so the cluster carries the chart's
``serve-app/cluster-spec-sha256`` of its own spec: canonical JSON of ``rayClusterConfig`` less
the fields KubeRay mutes in its own hash. A different hash is refused (exit 1), naming the
procedure that replaces the cluster. A change of muted fields only (replicas, min/max,
tolerations, ...) is a warning, never a refusal: KubeRay applies none of it to the running
cluster, on either strategy.

A hook Job rather than Helm's ``lookup``: it runs under ``helm upgrade``, ``helm rollback``
(which renders nothing) and Argo CD's PreSync (``helm template`` has no cluster to look up),
and it reads what runs, not the RayService's annotation, which a rollback rewrites.

The pod reads the API with its ServiceAccount (a Role that may ``get`` RayServices and
RayClusters in the namespace, nothing else). Everything else comes from the chart through the
environment (``SERVE_APP_GUARD_*``). Exit status: 0 proceed, 1 refused or the guard could not
read the cluster (the upgrade does not start), 2 a misconfigured Job.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HASH_ANNOTATION = "serve-app/cluster-spec-sha256"
FULL_HASH_ANNOTATION = "serve-app/cluster-spec-full-sha256"
ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
API_ENV = "SERVE_APP_GUARD_API"  # a base URL instead of the in-cluster one (tests, kubectl proxy)

MUTED_ONLY_WARNING = (
    "this release changes only fields of the Ray cluster that KubeRay v1.7.0 leaves out of its "
    "hash (a worker group's replicas, minReplicas, maxReplicas or workersToDelete, a pod's "
    "tolerations or scheduling gates, the upgrade strategy): KubeRay applies none of them to "
    "the running cluster {cluster}, and no new cluster starts. To apply them, make a change "
    "that starts a new cluster (server stores) or replace the cluster (docs/kubernetes.md, "
    '"Upgrades")'
)


class GuardError(Exception):
    """The guard could not read what runs; the message says why."""


@dataclass(frozen=True)
class Release:
    """What this release renders, as the chart passes it to the Job."""

    namespace: str
    rayservice: str
    strategy: str  # upgradeStrategy: None or NewCluster
    spec_hash: str  # canonical, muted fields left out (the annotation's value)
    full_hash: str  # canonical, nothing left out
    text_hash: str  # the rendered text's hash, as charts before the canonical hash annotated
    refusal: str  # the message that names the procedure

    @classmethod
    def from_environ(cls, environ: dict[str, str]) -> Release:
        names = {
            "rayservice": "SERVE_APP_GUARD_RAYSERVICE",
            "strategy": "SERVE_APP_GUARD_STRATEGY",
            "spec_hash": "SERVE_APP_GUARD_SPEC_SHA256",
            "full_hash": "SERVE_APP_GUARD_FULL_SHA256",
            "text_hash": "SERVE_APP_GUARD_TEXT_SHA256",
            "refusal": "SERVE_APP_GUARD_REFUSAL",
        }
        missing = [env for env in names.values() if not environ.get(env)]
        if missing:
            raise ValueError(f"the Job's environment lacks {', '.join(missing)}")
        namespace = environ.get("SERVE_APP_GUARD_NAMESPACE") or _account_file("namespace")
        values = {field: environ[env] for field, env in names.items()}
        return cls(namespace=namespace.strip(), **values)


@dataclass(frozen=True)
class Decision:
    proceed: bool
    message: str


def active_cluster_name(rayservice: dict[str, Any]) -> str | None:
    """The RayCluster serving (KubeRay's status), else the one being prepared."""
    status = rayservice.get("status") or {}
    for key in ("activeServiceStatus", "pendingServiceStatus"):
        name = (status.get(key) or {}).get("rayClusterName")
        if name:
            return str(name)
    return None


def decide(
    release: Release, rayservice: dict[str, Any] | None, cluster: dict[str, Any] | None
) -> Decision:
    if rayservice is None:
        return Decision(True, f"no RayService {release.rayservice} runs: nothing to compare")
    if cluster is None:
        return Decision(
            True, f"RayService {release.rayservice} has no RayCluster yet: nothing runs to compare"
        )
    name = cluster["metadata"]["name"]
    annotations = cluster["metadata"].get("annotations") or {}
    was = annotations.get(HASH_ANNOTATION, "")  # absent: a cluster from an older chart
    unchanged = was in (release.spec_hash, release.text_hash)
    if not unchanged and release.strategy == "None":
        return Decision(False, release.refusal)
    if not unchanged:
        return Decision(
            True,
            f"the Ray pods change: KubeRay starts a new cluster beside {name} "
            f"(upgradeStrategy {release.strategy}) and moves traffic once it is ready",
        )
    was_full = annotations.get(FULL_HASH_ANNOTATION, "")
    if was_full and was_full != release.full_hash:
        return Decision(True, "WARNING: " + MUTED_ONLY_WARNING.format(cluster=name))
    return Decision(True, f"the Ray pods of {name} are what this release renders")


class KubeApi:
    """GETs of namespaced objects with the pod's ServiceAccount (or ``SERVE_APP_GUARD_API``)."""

    def __init__(self, environ: dict[str, str]) -> None:
        override = environ.get(API_ENV)
        if override:
            self.base, self.context, self.token = override.rstrip("/"), None, None
            return
        host = environ.get("KUBERNETES_SERVICE_HOST")
        port = environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise GuardError("KUBERNETES_SERVICE_HOST is not set: not running in a pod")
        self.base = f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}"
        self.context = ssl.create_default_context(cafile=str(ACCOUNT / "ca.crt"))
        self.token = _account_file("token").strip()

    def get(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``; None when it does not exist."""
        request = urllib.request.Request(self.base + path, headers={"Accept": "application/json"})
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.context) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            if error.code in (401, 403):
                raise GuardError(
                    f"the API server answered {error.code} to GET {path}: the guard's "
                    "ServiceAccount may not read it (the chart's Role <release>-upgrade-guard "
                    "grants get on rayservices and rayclusters)"
                ) from error
            raise GuardError(f"the API server answered {error.code} to GET {path}") from error
        except (urllib.error.URLError, OSError) as error:
            raise GuardError(f"cannot reach the API server at {self.base}: {error}") from error


def run(release: Release, api: KubeApi) -> Decision:
    prefix = f"/apis/ray.io/v1/namespaces/{release.namespace}"
    rayservice = api.get(f"{prefix}/rayservices/{release.rayservice}")
    name = active_cluster_name(rayservice) if rayservice else None
    cluster = api.get(f"{prefix}/rayclusters/{name}") if name else None
    return decide(release, rayservice, cluster)


def _account_file(name: str) -> str:
    try:
        return (ACCOUNT / name).read_text()
    except OSError as error:
        raise GuardError(f"cannot read the ServiceAccount's {name}: {error}") from error


def main(environ: dict[str, str] | None = None) -> int:
    environ = dict(os.environ if environ is None else environ)
    try:
        release = Release.from_environ(environ)
        decision = run(release, KubeApi(environ))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except GuardError as error:
        print(
            f"upgrade guard: {error}. The upgrade does not start; to go ahead without the "
            "guard set upgradeGuard.enabled=false",
            file=sys.stderr,
        )
        return 1
    if not decision.proceed:
        print(f"upgrade refused: {decision.message}", file=sys.stderr)
        return 1
    print(f"upgrade guard: {decision.message}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
