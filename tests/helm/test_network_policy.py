"""The rendered NetworkPolicies evaluated with Kubernetes' semantics: who can reach which pod
on which port.

The evaluator follows the NetworkPolicy API (networking.k8s.io/v1): a pod selected by a
policy of a direction is isolated in that direction; a connection is allowed when the
destination's ingress AND the source's egress allow it; a direction allows it when any rule of
any policy selecting the pod matches the peer (absent ``from``/``to``: every peer; a peer's
``podSelector`` without ``namespaceSelector``: the policy's namespace; ``namespaceSelector``
{}: every namespace; ``ipBlock``: addresses outside the cluster's pods) and the port (absent
``ports``: every port). Label selectors with matchLabels and matchExpressions.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helm import rendering
from tests.helm.test_chart import SET_IMAGE

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "serve-app"
HELM = ROOT / ".cache" / "bin" / "helm"
NAMESPACE = "search"
NAMESPACE_LABELS = {
    "search": {"kubernetes.io/metadata.name": "search"},
    "kuberay-system": {"kubernetes.io/metadata.name": "kuberay-system"},
    "monitoring": {"kubernetes.io/metadata.name": "monitoring"},
    "other": {"kubernetes.io/metadata.name": "other"},
    "frontend": {"kubernetes.io/metadata.name": "frontend"},
    "kube-system": {"kubernetes.io/metadata.name": "kube-system"},
}


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict = field(default_factory=dict)


@dataclass(frozen=True)
class External:
    address: str


def selects(selector: dict | None, labels: dict) -> bool:
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def peer_matches(peer: dict, policy_namespace: str, other: Pod | External) -> bool:
    if "ipBlock" in peer:
        if not isinstance(other, External):
            return False  # pod traffic is matched by pod selectors, not by pod IPs here
        block = peer["ipBlock"]
        address = ipaddress.ip_address(other.address)
        if address not in ipaddress.ip_network(block["cidr"]):
            return False
        return not any(address in ipaddress.ip_network(c) for c in block.get("except", []))
    if isinstance(other, External):
        return False
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], NAMESPACE_LABELS[other.namespace]):
            return False
    elif other.namespace != policy_namespace:
        return False
    return "podSelector" not in peer or selects(peer["podSelector"], other.labels)


def port_matches(ports: list | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        if "port" not in entry:
            return True
        start, end = entry["port"], entry.get("endPort", entry["port"])
        if start <= port <= end:
            return True
    return False


def direction_allows(
    policies: list[dict], pod: Pod, direction: str, other: Pod | External, port: int, protocol: str
) -> bool:
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    isolating = [
        p
        for p in policies
        if p["metadata"].get("namespace", NAMESPACE) == pod.namespace
        and selects(p["spec"]["podSelector"], pod.labels)
        and direction in p["spec"].get("policyTypes", ["Ingress"])
    ]
    if not isolating:
        return True
    for policy in isolating:
        namespace = policy["metadata"].get("namespace", NAMESPACE)
        for rule in policy["spec"].get(key) or []:
            peers = rule.get(peers_key)
            if peers and not any(peer_matches(p, namespace, other) for p in peers):
                continue
            if port_matches(rule.get("ports"), port, protocol):
                return True
    return False


def allowed(
    policies: list[dict],
    source: Pod | External,
    destination: Pod | External,
    port: int,
    protocol="TCP",
) -> bool:
    """A connection from a pod, or from an address outside the cluster's pods (only the
    destination's ingress rules apply to it)."""
    if isinstance(source, External):
        assert isinstance(destination, Pod)
        return direction_allows(policies, destination, "Ingress", source, port, protocol)
    out = direction_allows(policies, source, "Egress", destination, port, protocol)
    if isinstance(destination, External):
        return out
    return out and direction_allows(policies, destination, "Ingress", source, port, protocol)


def render(values: str | None) -> list[dict]:
    return render_with(values)


def ray_pods(docs: list[dict]) -> tuple[Pod, list[Pod]]:
    (service,) = [d for d in docs if d["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    head = Pod(NAMESPACE, cluster["headGroupSpec"]["template"]["metadata"]["labels"])
    workers = [
        Pod(NAMESPACE, g["template"]["metadata"]["labels"]) for g in cluster["workerGroupSpecs"]
    ]
    return head, workers


OPERATOR = Pod("kuberay-system", {"app.kubernetes.io/name": "kuberay-operator"})
PROMETHEUS = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"})
STRANGER = Pod("other", {"app": "curious"})
NEIGHBOUR = Pod(NAMESPACE, {"app": "something-else"})
FRONTEND = Pod("frontend", {"app": "web"})
API_SERVER = External("10.96.0.1")
CONTROL_PLANE = External("172.16.0.2")  # where the API server's own connections come from
KONNECTIVITY = Pod("kube-system", {"k8s-app": "konnectivity-agent"})


@pytest.mark.parametrize("values", [None, "ci/gpu-production.yaml", "ci/external-stores.yaml"])
def test_what_must_talk_can_and_nothing_else(values):
    docs = render(values)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert policies, "networkPolicy.enabled is the default"
    head, workers = ray_pods(docs)

    # KubeRay submits serveConfigV2 to the dashboard and reads Serve's status there, and checks
    # the head's Serve proxy (/-/healthz on 8000) to put the head in the Serve Service or not.
    assert allowed(policies, OPERATOR, head, 8265)
    assert allowed(policies, OPERATOR, head, 8000)
    # Without networkPolicy.operatorUsesKubernetesProxy nothing comes from the API server.
    assert not allowed(policies, CONTROL_PLANE, head, 8265)
    # The autoscaler sidecar reaches the API server.
    assert allowed(policies, head, API_SERVER, 443)
    # Prometheus scrapes every Ray pod's metrics port.
    for pod in [head, *workers]:
        assert allowed(policies, PROMETHEUS, pod, 8080)
    for port in (44217, 44227):  # the head's autoscaler and dashboard exporters
        assert allowed(policies, PROMETHEUS, head, port)
        assert not allowed(policies, STRANGER, head, port)
    # Ray among its pods: GCS on the head, raylets and object managers on every pod.
    for worker in workers:
        assert allowed(policies, worker, head, 6379)
        assert allowed(policies, head, worker, 10_002)
        for other in workers:
            assert allowed(policies, worker, other, 20_000)
    # Clients reach the Serve proxies: anyone, or only networkPolicy.ingressFrom when set.
    client = FRONTEND if values == "ci/external-stores.yaml" else STRANGER
    for pod in [head, *workers]:
        assert allowed(policies, client, pod, 8000)
        assert allowed(policies, STRANGER, pod, 8000) == (client is STRANGER)
    # DNS.
    assert allowed(policies, workers[0], External("10.96.0.10"), 53, "UDP")

    # Nothing else gets in: not the dashboard (it runs jobs), not GCS, not metrics.
    for intruder in (STRANGER, NEIGHBOUR):
        assert not allowed(policies, intruder, head, 8265)
        assert not allowed(policies, intruder, head, 6379)
        assert not allowed(policies, intruder, workers[0], 8080)
        assert not allowed(policies, intruder, workers[0], 10_002)
    # And workers do not call out anywhere but the stores, DNS and each other.
    assert not allowed(policies, workers[0], External("203.0.113.9"), 22)
    assert not allowed(policies, workers[0], API_SERVER, 443)


def test_the_evaluator_isolates_only_selected_pods():
    """The semantics the test relies on, on a hand-written policy."""
    policy = {
        "metadata": {"name": "p", "namespace": NAMESPACE},
        "spec": {
            "podSelector": {"matchLabels": {"app": "db"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": {"app": "api"}}}],
                    "ports": [{"port": 5432}],
                }
            ],
        },
    }
    db, api = Pod(NAMESPACE, {"app": "db"}), Pod(NAMESPACE, {"app": "api"})
    assert allowed([policy], api, db, 5432)
    assert not allowed([policy], api, db, 22)
    assert not allowed([policy], Pod("other", {"app": "api"}), db, 5432)  # other namespace
    assert allowed([policy], db, api, 80)  # api is not selected: not isolated


OPENSEARCH = Pod(NAMESPACE, {"app.kubernetes.io/name": "opensearch"})  # the stores' charts
QDRANT = Pod(NAMESPACE, {"app.kubernetes.io/name": "qdrant"})
MANAGED_STORE = External("10.20.30.40")  # a store outside the cluster (managed OpenSearch)


def validate_pod(docs: list[dict]) -> Pod:
    (job,) = [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("-validate")]
    return Pod(NAMESPACE, job["spec"]["template"]["metadata"]["labels"])


@pytest.mark.parametrize("values", ["ci/gpu-production.yaml", "ci/external-stores.yaml"])
def test_the_validate_hook_reaches_the_stores_and_nothing_else(values):
    """The pre-upgrade validate Job's pod (tests/helm/test_validate_hook.py) under every policy
    the chart renders, its own included: it reaches the stores where the Ray pods do
    (networkPolicy.storeEgress) and DNS, nothing else; nothing reaches it; the Ray pods'
    policies do not select it (it must not ride on their rules)."""
    docs = render(values)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    validate = validate_pod(docs)
    head, workers = ray_pods(docs)
    for store, port in ((OPENSEARCH, 9200), (QDRANT, 6333), (QDRANT, 6334)):
        assert allowed(policies, validate, store, port)
        assert allowed(policies, workers[0], store, port) == allowed(
            policies, validate, store, port
        )
    assert allowed(policies, validate, External("10.96.0.10"), 53, "UDP")
    assert allowed(policies, validate, External("10.96.0.10"), 53, "TCP")
    # storeEgress names where the stores are (their namespace, or the stores' pods by default)
    assert not allowed(policies, validate, Pod("other", {"app": "db"}), 9200)
    assert not allowed(policies, validate, MANAGED_STORE, 9200)
    # The Hub only where the Job fetches the models itself (modelCache.type emptyDir, as
    # ci/external-stores.yaml has it; ci/gpu-production.yaml reads a shared claim).
    job = [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("-validate")]
    fetches = bool(job[0]["spec"]["template"]["spec"].get("initContainers"))
    assert fetches == (values == "ci/external-stores.yaml")
    assert allowed(policies, validate, External("18.164.52.75"), 443) == fetches
    # Nothing else: not the API server, not the cluster's private ranges, not the Ray pods.
    assert not allowed(policies, validate, External("10.0.12.7"), 443)
    assert not allowed(policies, validate, API_SERVER, 443)
    for port in (6379, 8265, 8000, 8080):
        assert not allowed(policies, validate, head, port)
    for intruder in (STRANGER, NEIGHBOUR, PROMETHEUS, head, workers[0]):
        assert not allowed(policies, intruder, validate, 8080)
    selecting = [
        p["metadata"]["name"]
        for p in policies
        if selects(p["spec"]["podSelector"], validate.labels)
    ]
    assert selecting == [f"{validate.labels['app.kubernetes.io/instance']}-serve-app-validate"]


REDIS = Pod("other", {"app.kubernetes.io/name": "redis"})
FT_ON = (
    "--set",
    "gcsFaultTolerance.enabled=true",
    "--set",
    "gcsFaultTolerance.redisAddress=r:6379",
)


def render_with(values: str | None, *extra: str) -> list[dict]:
    args = [str(HELM), "template", "rel", str(CHART), "--namespace", NAMESPACE, *SET_IMAGE]
    if values:
        args += ["-f", str(CHART / values)]
    return rendering.documents(*args, *extra)


@pytest.mark.parametrize("values", [None, "ci/gpu-production.yaml", "ci/external-stores.yaml"])
@pytest.mark.parametrize("autoscaler", [True, False])
def test_with_gcs_fault_tolerance_the_head_reaches_redis(values, autoscaler):
    """Only the head talks to Redis (KubeRay gives RAY_REDIS_ADDRESS and the password to the
    head container only), and KubeRay's Redis cleanup Job runs a pod with the head's labels:
    with fault tolerance on both reach networkPolicy.redisEgress (6379 by default), workers do
    not; off, the head does not either. The rest of the matrix stays as it was."""
    extra = ("--set", f"autoscaler.enabled={str(autoscaler).lower()}")
    off_extra = (*extra, "--set", "gcsFaultTolerance.enabled=false")
    head_off, _ = ray_pods(docs_off := render_with(values, *off_extra))
    off = [d for d in docs_off if d["kind"] == "NetworkPolicy"]
    assert not allowed(off, head_off, REDIS, 6379)

    docs = render_with(values, *extra, *FT_ON)
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    head, workers = ray_pods(docs)
    cleanup = Pod(NAMESPACE, {**head.labels, "ray.io/node-type": "redis-cleanup"})
    for pod in (head, cleanup):
        assert allowed(policies, pod, REDIS, 6379)
        assert allowed(policies, pod, External("10.0.0.7"), 6379)  # a managed Redis
        assert not allowed(policies, pod, REDIS, 6380)
    for worker in workers:
        assert not allowed(policies, worker, REDIS, 6379)
    assert allowed(policies, head, API_SERVER, 443) == autoscaler
    assert allowed(policies, OPERATOR, head, 8265)
    assert not allowed(policies, STRANGER, head, 6379)  # the GCS port stays closed


def test_redis_egress_narrowed_to_its_namespace():
    narrowed = (
        '[{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": '
        '"other"}}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "redis"}}}], '
        '"ports": [{"port": 6379, "protocol": "TCP"}]}]'
    )
    docs = render_with(None, *FT_ON, "--set-json", f"networkPolicy.redisEgress={narrowed}")
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    head, _ = ray_pods(docs)
    assert allowed(policies, head, REDIS, 6379)
    assert not allowed(policies, head, Pod("other", {"app": "db"}), 6379)
    assert not allowed(policies, head, External("10.0.0.7"), 6379)


PROXY_PEERS = {
    "control-plane-cidr": '[{"ipBlock": {"cidr": "172.16.0.0/28"}}]',
    "konnectivity-agents": (
        '[{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},'
        ' "podSelector": {"matchLabels": {"k8s-app": "konnectivity-agent"}}}]'
    ),
}


@pytest.mark.parametrize("peers", list(PROXY_PEERS), ids=list(PROXY_PEERS))
@pytest.mark.parametrize("values", [None, "ci/gpu-production.yaml", "ci/external-stores.yaml"])
def test_with_use_kubernetes_proxy_the_api_server_reaches_the_head(values, peers):
    """KubeRay's useKubernetesProxy: the dashboard client goes through
    /api/v1/namespaces/<ns>/services/<head>:dashboard/proxy and the Serve health check through
    .../pods/<head>:8000/proxy/ (ray-operator/controllers/ray/utils/util.go, v1.7.0), so the
    head's 8265 and 8000 are reached from the API server's addresses (or the Konnectivity
    agents that carry its connections): admitted from networkPolicy.apiServerFrom, and from
    nothing else that was not admitted before."""
    source = CONTROL_PLANE if peers == "control-plane-cidr" else KONNECTIVITY
    docs = render_with(
        values,
        "--set", "networkPolicy.operatorUsesKubernetesProxy=true",
        "--set-json", f"networkPolicy.apiServerFrom={PROXY_PEERS[peers]}",
    )  # fmt: skip
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    head, workers = ray_pods(docs)
    for port in (8265, 8000):
        assert allowed(policies, source, head, port)
        assert allowed(policies, OPERATOR, head, port)  # the operator without the flag, too
    # The dashboard stays closed to everyone else (8000 is also the API port: open to clients
    # as networkPolicy.ingressFrom says, checked above).
    assert not allowed(policies, External("203.0.113.9"), head, 8265)
    assert not allowed(policies, STRANGER, head, 8265)
    for port in (6379, 8080, 10_002):  # the proxy path opens nothing else on the head
        assert not allowed(policies, source, head, port)
    assert not allowed(policies, source, workers[0], 8265)
    assert not allowed(policies, Pod("kube-system", {"k8s-app": "kube-dns"}), head, 8265)


def test_use_kubernetes_proxy_without_its_source_is_refused():
    from tests.helm.test_chart import render as render_raw

    result = render_raw(
        str(HELM), CHART, None, "--set", "networkPolicy.operatorUsesKubernetesProxy=true"
    )
    assert result.returncode != 0
    assert "networkPolicy.apiServerFrom" in result.stderr, result.stderr


@pytest.mark.parametrize("values", [None, "ci/cpu-small.yaml"])
def test_with_the_embedded_store_no_pod_reaches_a_store_port(values):
    """The embedded store keeps its data in the store pod's volume: the Ray pods' egress holds
    no store rule (only DNS and each other, and the Hub for the pods that fetch)."""
    docs = render_with(values, "--set", "networkPolicy.enabled=true")
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    head, workers = ray_pods(docs)
    for pod in [head, *workers]:
        for store, port in ((OPENSEARCH, 9200), (QDRANT, 6333), (MANAGED_STORE, 6334)):
            assert not allowed(policies, pod, store, port), (pod.labels, port)
