"""Pod disruption budgets: every Ray pod (head and each worker group) is covered by exactly
one budget, matched with Kubernetes' label-selector semantics, so a node drain takes at most
``maxUnavailable`` pods of one group and the head only when allowed."""

from __future__ import annotations

import pytest

from tests.helm.test_chart import CHART, HELM, objects
from tests.helm.test_network_policy import render, selects

VALUES = [None, "ci/cpu-small.yaml", "ci/gpu-production.yaml", "ci/external-stores.yaml"]


@pytest.mark.parametrize("values", VALUES)
def test_each_ray_group_has_its_own_budget(values):
    docs = render(values)
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    (service,) = [d for d in docs if d["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    groups = {"head": cluster["headGroupSpec"]}
    groups.update({g["groupName"]: g for g in cluster["workerGroupSpecs"]})
    for name, group in groups.items():
        labels = group["template"]["metadata"]["labels"]
        covering = [b for b in budgets if selects(b["spec"]["selector"], labels)]
        assert len(covering) == 1, (name, [b["metadata"]["name"] for b in covering])
        expected = 0 if name == "head" else 1
        assert covering[0]["spec"]["maxUnavailable"] == expected, name


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
    docs = render_with(values, *extra)
    budgets = {b["metadata"]["name"]: b["spec"]["maxUnavailable"] for b in docs
               if b["kind"] == "PodDisruptionBudget"}  # fmt: skip
    assert budgets.pop("rel-serve-app-head") == expected
    assert set(budgets.values()) == {1}
