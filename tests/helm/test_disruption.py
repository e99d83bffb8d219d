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
