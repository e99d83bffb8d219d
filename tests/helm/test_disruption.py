"""Pod disruption budgets: every Ray pod (head and each worker group) is covered by exactly
one budget, matched with Kubernetes' label-selector semantics, and the budget lets a node drain
evict Ray pods, judged by the disruption controller's own rules (tests/helm/disruption.py, held
here to cases of its ``disruption_test.go``). Ray pods are controlled by a RayCluster, which has
no scale subresource: only an integer ``minAvailable`` can be evaluated for them."""

from __future__ import annotations

import pytest

from tests.helm.disruption import Controller, Pod, drain_every_node, may_evict, sync
from tests.helm.test_chart import CHART, HELM, objects
from tests.helm.test_chart import render as render_raw
from tests.helm.test_network_policy import render, selects

VALUES = [None, "ci/cpu-small.yaml", "ci/gpu-production.yaml", "ci/external-stores.yaml"]
REPLICA_SET = Controller("apps", "ReplicaSet", replicas=7)


def test_no_selector():
    """TestNoSelector: minAvailable 3 over no pods, then one pod."""
    assert sync({"minAvailable": 3}, []) == (0, 0, 3, 0, "")
    assert sync({"minAvailable": 3}, [Pod("yo-yo-yo")]) == (0, 1, 3, 1, "")


def test_unavailable():
    """TestUnavailable: the counts follow the pods; one pod not ready takes the allowance."""
    pods = [Pod(f"yo-yo-yo {i}") for i in range(4)]
    for i in range(4):
        assert sync({"minAvailable": 3}, pods[:i]) == (0, i, 3, i, "")
    assert sync({"minAvailable": 3}, pods) == (1, 4, 3, 4, "")
    pods[0] = Pod("yo-yo-yo 0", ready=False)
    assert sync({"minAvailable": 3}, pods) == (0, 3, 3, 4, "")


def test_integer_max_unavailable():
    """TestIntegerMaxUnavailable: no disruption for no pods, nor for a pod without controller."""
    assert sync({"maxUnavailable": 1}, []).disruptions_allowed == 0
    assert sync({"maxUnavailable": 1}, [Pod("naked")]).disruptions_allowed == 0


def test_integer_max_unavailable_with_scaling():
    """TestIntegerMaxUnavailableWithScaling: the expected count is the controller's scale."""
    pods = [Pod("pod", controller=REPLICA_SET)]
    assert sync({"maxUnavailable": 2}, pods) == (0, 1, 5, 7, "")
    scaled = [Pod("pod", controller=Controller("apps", "ReplicaSet", replicas=5))]
    assert sync({"maxUnavailable": 2}, scaled) == (0, 1, 3, 5, "")


@pytest.mark.parametrize(
    "has_scale,fails",
    [(True, False), (False, True)],
    ids=["resource implements scale", "resource does not implement scale"],
)
def test_scale_finder_no_resource(has_scale, fails):
    """TestScaleFinderNoResource: a custom controller without a scale subresource fails the
    sync (then failSafe: nothing may be disrupted)."""
    custom = Controller("custom.k8s.io", "customresource", 10, has_scale_subresource=has_scale)
    status = sync({"maxUnavailable": 3}, [Pod(f"pod-{i}", controller=custom) for i in range(10)])
    assert bool(status.sync_failed) is fails
    assert status.disruptions_allowed == (0 if fails else 3)


def ray_cluster_pods(group: str, count: int) -> list[Pod]:
    """``count`` ready pods of a Ray group: their controller is the RayCluster, whose CRD
    (KubeRay v1.7.0's ray.io_rayclusters.yaml) has the status subresource only."""
    cluster = Controller("ray.io", "RayCluster", replicas=count, has_scale_subresource=False)
    return [Pod(f"{group}-{i}", controller=cluster) for i in range(count)]


def budgets_by_group(docs: list[dict]) -> dict[str, tuple[dict, dict]]:
    """group name ("head" for the head) -> (its group spec, the one budget selecting it)."""
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    (service,) = [d for d in docs if d["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    groups = {"head": cluster["headGroupSpec"]}
    groups.update({g["groupName"]: g for g in cluster["workerGroupSpecs"]})
    out = {}
    for name, group in groups.items():
        labels = group["template"]["metadata"]["labels"]
        covering = [b for b in budgets if selects(b["spec"]["selector"], labels)]
        assert len(covering) == 1, (name, [b["metadata"]["name"] for b in covering])
        out[name] = (group, covering[0])
    return out


@pytest.mark.parametrize("values", VALUES)
def test_a_drain_may_evict_one_pod_of_each_worker_group(values):
    """At any size the autoscaler may give a worker group (minReplicas to maxReplicas), with
    every pod ready, the disruption controller allows evicting one of its pods, and at
    minReplicas no more than one; the head's one pod too (test_the_head_budget_...)."""
    for name, (group, budget) in budgets_by_group(render(values)).items():
        if name == "head":
            assert sync(budget["spec"], ray_cluster_pods(name, 1)).disruptions_allowed == 1
            continue
        low, high = group["minReplicas"], group["maxReplicas"]
        for count in range(max(low, 1), high + 1):
            status = sync(budget["spec"], ray_cluster_pods(name, count))
            assert not status.sync_failed, (name, status)
            assert status.disruptions_allowed >= 1, (name, count, status)
        if low >= 1:
            assert sync(budget["spec"], ray_cluster_pods(name, low)).disruptions_allowed == 1


def test_pod_monitor_scrapes_every_ray_pod_on_its_metrics_port():
    docs = render("ci/gpu-production.yaml")
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]
    (service,) = [d for d in docs if d["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    (endpoint,) = [e for e in monitor["spec"]["podMetricsEndpoints"] if e["port"] == "metrics"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        template = group["template"]
        assert selects(monitor["spec"]["selector"], template["metadata"]["labels"])
        ports = {
            p.get("name"): p["containerPort"] for p in template["spec"]["containers"][0]["ports"]
        }
        assert ports[endpoint["port"]] == 8080  # Ray's metrics-export-port default


def render_with(values: str | None, *extra: str) -> list[dict]:
    return objects(str(HELM), CHART, values, *extra)


FT_ON = (
    "--set",
    "gcsFaultTolerance.enabled=true",
    "--set",
    "gcsFaultTolerance.redisAddress=r:6379",
)


@pytest.mark.parametrize(
    "extra,expected",
    [
        ((), 1),
        (FT_ON, 1),
        ((*FT_ON, "--set", "podDisruptionBudget.headMaxUnavailable=0"), 0),
        (("--set", "podDisruptionBudget.headMaxUnavailable=0"), 0),
    ],
    ids=["no FT: 1", "FT: 1", "FT, set 0", "no FT, set 0"],
)
@pytest.mark.parametrize("values", [None, "ci/gpu-production.yaml"])
def test_the_head_budget_never_holds_a_drain_unless_told(values, extra, expected):
    """Unset, a drain may take the head, with GCS fault tolerance or without (a budget of 0
    over its one pod would hold every drain of its node for good); 0 is the operator's
    explicit choice. The worker groups' budgets do not move."""
    groups = budgets_by_group(render_with(values, *extra))
    _, head = groups.pop("head")
    assert sync(head["spec"], ray_cluster_pods("head", 1)).disruptions_allowed == expected
    for name, (group, budget) in groups.items():
        pods = ray_cluster_pods(name, max(group["minReplicas"], 1))
        assert sync(budget["spec"], pods).disruptions_allowed == 1, name


def eviction_cases() -> list[tuple]:
    """Cases of the eviction subresource's unhealthy-pod rule (KEP-3017, the table of
    ``TestEvictionIngorePDB``/``TestEvictionPDBStatus`` reduced to its decision): (policy,
    pods ready of 3, minAvailable, evict a ready pod?, evict the unready pod?)."""
    return [
        (None, 3, 2, True, None),  # budget met: a ready pod may go
        (None, 2, 2, False, True),  # IfHealthyBudget: the unready pod goes, budget untouched
        (None, 1, 2, False, False),  # IfHealthyBudget, budget broken: the unready pod stays
        ("AlwaysAllow", 1, 2, False, True),  # AlwaysAllow: the unready pod goes anyway
        ("AlwaysAllow", 0, 0, None, True),  # minAvailable 0, every pod unready
        (None, 0, 1, None, False),
    ]


@pytest.mark.parametrize("policy,ready,minimum,ready_goes,unready_goes", eviction_cases())
def test_the_eviction_rule_for_pods_that_are_not_ready(
    policy, ready, minimum, ready_goes, unready_goes
):
    spec = {"minAvailable": minimum}
    if policy:
        spec["unhealthyPodEvictionPolicy"] = policy
    pods = [Pod(f"p{i}", ready=i < ready) for i in range(3)]
    if ready_goes is not None:
        assert may_evict(spec, pods, pods[0]) is ready_goes
    if unready_goes is not None:
        assert may_evict(spec, pods, pods[-1]) is unready_goes


def layout(values: str | None, *extra: str, size: str = "replicas") -> dict:
    """group -> (its budget's spec, pods): the groups at their starting size or at
    minReplicas (the autoscaler's floor)."""
    return {
        name: (budget["spec"], 1 if name == "head" else group[size])
        for name, (group, budget) in budgets_by_group(render_with(values, *extra)).items()
    }


@pytest.mark.parametrize("size", ["replicas", "minReplicas"])
@pytest.mark.parametrize("values", VALUES)
def test_every_node_drains_in_turn_without_an_endless_block(values, size):
    """Every node of the layout drained one after the other (kubectl drain, an EKS
    node-group update) gets past every pod, judged by the disruption controller and the
    eviction rule; in the production layout no worker group is ever left without a ready pod,
    and the head is taken only where GCS fault tolerance keeps the replicas serving."""
    groups = layout(values, size=size)
    result = drain_every_node(groups)
    assert not result.blocked, result
    if values == "ci/gpu-production.yaml":
        workers = {g: n for g, n in result.fewest_ready.items() if g != "head"}
        assert min(workers.values()) >= 1, result.fewest_ready
        (service,) = [d for d in render_with(values) if d["kind"] == "RayService"]
        assert "gcsFaultToleranceOptions" in service["spec"]["rayClusterConfig"]


def test_a_head_budget_of_zero_is_the_block_it_is_said_to_be():
    """The operator's explicit 0 does hold the head's node (the drain test above can fail)."""
    groups = layout(None, "--set", "podDisruptionBudget.headMaxUnavailable=0")
    assert drain_every_node(groups).blocked.startswith("node of head-0")


@pytest.mark.parametrize(
    "policy,blocked",
    [("AlwaysAllow", False), ("IfHealthyBudget", True)],
    ids=["AlwaysAllow (chart)", "IfHealthyBudget (Kubernetes' default)"],
)
def test_a_crash_looping_group_does_not_hold_a_drain(policy, blocked):
    """Both dense pods of the production layout crash-loop (never ready): with the chart's
    AlwaysAllow the drain evicts them and goes on; under Kubernetes' default policy their
    budget (one of two healthy) is broken, so the drain stops there for good."""
    extra = ("--set", f"podDisruptionBudget.unhealthyPodEvictionPolicy={policy}")
    groups = layout("ci/gpu-production.yaml", *extra)
    result = drain_every_node(groups, unready={"dense-gpu": groups["dense-gpu"][1]})
    assert bool(result.blocked) is blocked, result
    if blocked:
        assert result.blocked.startswith("node of dense-gpu-0")


def test_pod_annotations_and_labels_per_group():
    """karpenter.sh/do-not-disrupt and the like go on one group's pods only; the chart's own
    labels cannot be overridden (the budgets above select by them)."""
    docs = render_with(
        None,
        "--set-string", "workerGroups.llmGpu.podAnnotations.karpenter\\.sh/do-not-disrupt=true",
        "--set", "workerGroups.llmGpu.podLabels.team=search",
    )  # fmt: skip
    groups = budgets_by_group(docs)
    llm = groups["llm-gpu"][0]["template"]["metadata"]
    assert llm["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    assert llm["labels"]["team"] == "search" and llm["labels"]["serve-app/group"] == "llm-gpu"
    assert "annotations" not in groups["dense-gpu"][0]["template"]["metadata"]
    refused = render_raw(str(HELM), CHART, None, "--set", "head.podLabels.serve-app/role=x")
    assert refused.returncode != 0 and "one of the chart's own labels" in refused.stderr


@pytest.mark.parametrize("values", [None, "ci/gpu-production.yaml"])
def test_without_the_llm_its_gpu_group_keeps_no_pod(values):
    """config.llm.enabled false: no deployment asks for llm_slot, so the llm-gpu group starts
    and keeps no pod (no GPU node idles for it); its budget asks for none."""
    groups = budgets_by_group(render_with(values, "--set", "config.llm.enabled=false"))
    group, budget = groups["llm-gpu"]
    assert (group["replicas"], group["minReplicas"]) == (0, 0)
    assert budget["spec"]["minAvailable"] == 0
    enabled, _ = budgets_by_group(render_with(values))["llm-gpu"]
    assert enabled["minReplicas"] >= 1


def test_in_production_a_drain_leaves_every_deployment_a_replica():
    """Two pods per group help only if each holds a replica: in the production values every
    deployment keeps two replicas at least, and Serve spreads a deployment's replicas over
    nodes (its default scheduling strategy, not the compact one), so a drain that takes one
    pod leaves each deployment one replica."""
    import yaml

    (service,) = [d for d in render("ci/gpu-production.yaml") if d["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    (app,) = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
    for deployment in app["deployments"]:
        floor = deployment.get("autoscaling_config", {}).get("min_replicas")
        assert (floor or deployment.get("num_replicas", 1)) >= 2, deployment["name"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        env = {e["name"]: e.get("value") for e in group["template"]["spec"]["containers"][0]["env"]}
        assert env.get("RAY_SERVE_USE_COMPACT_SCHEDULING_STRATEGY", "0") in ("0", "false")
