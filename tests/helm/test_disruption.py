"""Pod disruption budgets: every Ray pod (head and each worker group) is covered by exactly
one budget, matched with Kubernetes' label-selector semantics, so a node drain takes at most
``maxUnavailable`` pods of one group and the head only when allowed."""

from __future__ import annotations

import pytest

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
