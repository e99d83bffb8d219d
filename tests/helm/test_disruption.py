"""Pod disruption budgets: every Ray pod (head and each worker group) is covered by exactly
one budget, matched with Kubernetes' label-selector semantics, and the budget lets a node drain
evict Ray pods, judged by the disruption controller's own rules (tests/helm/disruption.py, held
here to cases of its ``disruption_test.go``). Ray pods are controlled by a RayCluster, which has
no scale subresource: only an integer ``minAvailable`` can be evaluated for them."""

from __future__ import annotations

import pytest

from tests.helm.disruption import Controller, Pod, sync
from tests.helm.test_chart import CHART, HELM, objects
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
    minReplicas no more than one; the head none (no GCS fault tolerance)."""
    for name, (group, budget) in budgets_by_group(render(values)).items():
        if name == "head":
            assert sync(budget["spec"], ray_cluster_pods(name, 1)).disruptions_allowed == 0
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
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
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
        ((), 0),
        (FT_ON, 1),
        ((*FT_ON, "--set", "podDisruptionBudget.headMaxUnavailable=0"), 0),
        (("--set", "podDisruptionBudget.headMaxUnavailable=1"), 1),
    ],
    ids=["no FT: 0", "FT: 1", "FT, set 0", "no FT, set 1"],
)
@pytest.mark.parametrize("values", [None, "ci/gpu-production.yaml"])
def test_the_head_budget_follows_gcs_fault_tolerance(values, extra, expected):
    """Unset, the head's budget is 0 without GCS fault tolerance (losing the head restarts
    every replica) and 1 with it (KubeRay replaces the head, the replicas keep serving); a
    value set wins. The worker groups' budgets do not move."""
    groups = budgets_by_group(render_with(values, *extra))
    _, head = groups.pop("head")
    assert sync(head["spec"], ray_cluster_pods("head", 1)).disruptions_allowed == expected
    for name, (group, budget) in groups.items():
        pods = ray_cluster_pods(name, max(group["minReplicas"], 1))
        assert sync(budget["spec"], pods).disruptions_allowed == 1, name


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
