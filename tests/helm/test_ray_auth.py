"""The Ray dashboard closed: Ray's token authentication on for the RayService's cluster, the
dashboard's network policy limited to the operator's pods in the operator's namespace, and the
Kubernetes API token only in the autoscaler sidecar.

KubeRay v1.7.0 (``ray-operator/controllers/ray/common/pod.go``, ``SetContainerTokenAuthEnvVars``)
gives every Ray container ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` from the Secret
(``authOptions.secretName``, else the one it generates per RayCluster, named after it), each
only where the container does not set that variable itself; ``utils/validation.go`` requires
Ray 2.52 or later for token mode and refuses Kubernetes-token auth for a RayService.
"""

from __future__ import annotations

import posixpath

import pytest
from ray.autoscaler._private.kuberay import node_provider

from tests.helm.test_chart import CHART, HELM, VALUES, objects, rayservice
from tests.helm.test_network_policy import NAMESPACE, OPERATOR, Pod, allowed, ray_pods

IMPOSTOR = Pod("other", {"app.kubernetes.io/name": "kuberay-operator"})


def kuberay_token_env(container: dict, cluster_name: str, auth: dict) -> dict:
    """The container's env after KubeRay's SetContainerTokenAuthEnvVars (token mode): name ->
    value, or -> (secret, key) for a secretKeyRef."""
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}
    env.setdefault("RAY_AUTH_MODE", "token")
    secret = auth.get("secretName") or cluster_name
    env.setdefault("RAY_AUTH_TOKEN", {"secretKeyRef": {"name": secret, "key": "auth_token"}})
    return env


def ray_containers(cluster: dict) -> list[dict]:
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    return [g["template"]["spec"]["containers"][0] for g in groups]


@pytest.mark.parametrize(
    "extra,secret", [((), None), (("--set", "rayAuth.existingSecret=ray-auth"), "ray-auth")]
)
@pytest.mark.parametrize("values", VALUES)
def test_every_ray_container_asks_for_the_cluster_token(values, extra, secret):
    cluster = rayservice(objects(str(HELM), CHART, values, *extra))["spec"]["rayClusterConfig"]
    auth = cluster["authOptions"]
    assert auth == ({"mode": "token", "secretName": secret} if secret else {"mode": "token"})
    assert "enableK8sTokenAuth" not in auth  # KubeRay refuses it for a RayService
    major, minor, *_ = (int(part) for part in cluster["rayVersion"].split("."))
    assert (major, minor) >= (2, 52)  # KubeRay's minimum for token mode
    for container in ray_containers(cluster):
        env = kuberay_token_env(container, "rel-serve-app-raycluster-x", auth)
        assert env["RAY_AUTH_MODE"] == "token", container["name"]
        expected = secret or "rel-serve-app-raycluster-x"
        assert env["RAY_AUTH_TOKEN"] == {"secretKeyRef": {"name": expected, "key": "auth_token"}}


def test_token_auth_can_be_turned_off():
    cluster = rayservice(objects(str(HELM), CHART, None, "--set", "rayAuth.enabled=false"))
    assert "authOptions" not in cluster["spec"]["rayClusterConfig"]


@pytest.mark.parametrize("values", VALUES)
def test_only_the_autoscaler_sidecar_holds_an_api_token(values):
    """No Ray pod automounts its service account's token; with the in-tree autoscaler, the
    head's token volume (what automounting gives) is mounted into the autoscaler container
    alone, at the path Ray's autoscaler reads it from. The one other token is the upgrade
    guard's, a hook Job whose Role may only get the RayService and RayClusters
    (tests/helm/test_upgrades.py)."""
    docs = objects(str(HELM), CHART, values)
    cluster = rayservice(docs)["spec"]["rayClusterConfig"]
    guard = [d for d in docs if d["metadata"]["name"].endswith("-upgrade-guard")]
    assert {d["kind"] for d in guard} == {"ServiceAccount", "Role", "RoleBinding", "Job"}
    (account,) = [d for d in docs if d["kind"] == "ServiceAccount" and d not in guard]
    assert account["automountServiceAccountToken"] is False
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    for group in groups:
        pod = group["template"]["spec"]
        assert pod.get("automountServiceAccountToken") is False, group.get("groupName", "head")
        for container in pod["containers"] + pod.get("initContainers", []):
            mounts = {m["mountPath"] for m in container.get("volumeMounts") or []}
            assert not any(m.startswith("/var/run/secrets/kubernetes.io") for m in mounts)
    head_volumes = {v["name"]: v for v in cluster["headGroupSpec"]["template"]["spec"]["volumes"]}
    if not cluster["enableInTreeAutoscaling"]:
        assert "autoscaler-api-token" not in head_volumes
        return
    (mount,) = cluster["autoscalerOptions"]["volumeMounts"]
    assert mount["mountPath"] == posixpath.dirname(node_provider.IN_CLUSTER_TOKEN_PATH)
    assert posixpath.dirname(node_provider.IN_CLUSTER_CA_CERT_PATH) == mount["mountPath"]
    sources = head_volumes[mount["name"]]["projected"]["sources"]
    paths = {s["serviceAccountToken"]["path"] for s in sources if "serviceAccountToken" in s}
    paths |= {i["path"] for s in sources if "configMap" in s for i in s["configMap"]["items"]}
    assert {"token", "ca.crt"} <= paths


@pytest.mark.parametrize("values", [None, "ci/gpu-production.yaml", "ci/external-stores.yaml"])
def test_the_dashboard_admits_the_operator_and_no_lookalike(values):
    """The operator's pods in the operator's namespace reach 8265; a pod carrying the
    operator's label in any other namespace does not (namespaceSelector AND podSelector)."""
    docs = objects(str(HELM), CHART, values)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    head, _ = ray_pods(docs)
    assert head.namespace == NAMESPACE
    assert allowed(policies, OPERATOR, head, 8000)  # the Serve proxy's /-/healthz
    assert allowed(policies, OPERATOR, head, 8265)
    assert not allowed(policies, IMPOSTOR, head, 8265)


@pytest.mark.parametrize("values", VALUES)
def test_every_ray_container_hardens_serves_haproxy(values):
    """Serve's HAProxy template has no setting for its header timeout, admin socket, stats
    page or X-Forwarded-For: the image's hook does it where these are set
    (tests/deployments/test_process_hook.py shows the hook acting on them)."""
    extra = ("--set", "config.api.connections.header_timeout_s=7",
             "--set", "config.api.trusted_proxies={10.0.0.0/8,fd00::/8}")  # fmt: skip
    cluster = rayservice(objects(str(HELM), CHART, values, *extra))["spec"]["rayClusterConfig"]
    for container in ray_containers(cluster):
        env = {e["name"]: e.get("value") for e in container.get("env") or []}
        assert env["SERVE_APP_HAPROXY_HOOK"] == "1", container["name"]
        assert env["SERVE_APP_HEADER_TIMEOUT_S"] == "7", container["name"]
        assert env["SERVE_APP_TRUSTED_PROXIES"] == "10.0.0.0/8,fd00::/8", container["name"]
