"""How Kubernetes' disruption controller computes a PodDisruptionBudget's status, ported from
``pkg/controller/disruption/disruption.go`` (github.com/kubernetes/kubernetes): ``trySync``,
``getExpectedPodCount``, ``getExpectedScale`` with its controller finders, ``countHealthyPods``,
``updatePdbStatus`` and ``failSafe``. The rules are ported, not the code;
``tests/helm/test_disruption.py`` holds the port to cases of the controller's own
``disruption_test.go``.

The point for Ray pods: a ``maxUnavailable`` budget, or a percentage ``minAvailable``, needs
the expected pod count from each pod's controller, read from the built-in workloads or from a
``scale`` subresource. KubeRay's pods are controlled by a RayCluster, whose CRD has no scale
subresource, so the sync fails (event ``CalculateExpectedPodCountFailed``) and ``failSafe``
sets ``disruptionsAllowed`` to 0: every eviction is refused. An integer ``minAvailable`` uses
the number of selected pods instead and never asks the controller.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

BUILT_IN_CONTROLLERS = {
    ("", "ReplicationController"),
    ("apps", "ReplicaSet"),
    ("extensions", "ReplicaSet"),
    ("apps", "StatefulSet"),
}


@dataclass(frozen=True)
class Controller:
    """A pod's controller as the finders see it: its API group and kind, the replicas it
    declares, and whether its resource serves a ``scale`` subresource."""

    group: str
    kind: str
    replicas: int
    has_scale_subresource: bool = False


@dataclass(frozen=True)
class Pod:
    name: str
    ready: bool = True
    controller: Controller | None = None  # None: a naked pod
    terminating: bool = False


class PdbStatus(NamedTuple):
    disruptions_allowed: int
    current_healthy: int
    desired_healthy: int
    expected_pods: int
    sync_failed: str = ""  # failSafe's condition message; "" when the sync succeeded


class SyncFailed(Exception):
    """trySync's error: the controller then runs failSafe."""


def scaled_value(value: int | str, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        raise SyncFailed("invalid value for IntOrString: invalid type: string is not a percentage")
    percent = int(value[:-1])
    scaled = percent * total / 100
    return math.ceil(scaled) if round_up else math.floor(scaled)


def expected_scale(pods: Sequence[Pod]) -> int:
    """getExpectedScale: the sum of the replicas of the pods' distinct controllers, found by
    the built-in finders or the scale subresource; naked pods are skipped (unmanaged). A
    controller whose resource has no scale subresource fails the sync."""
    scales: dict[int, int] = {}
    for pod in pods:
        controller = pod.controller
        if controller is None or id(controller) in scales:
            continue
        built_in = (controller.group, controller.kind) in BUILT_IN_CONTROLLERS
        if not built_in and not controller.has_scale_subresource:
            raise SyncFailed(
                f"{controller.kind.lower()}s.{controller.group} does not implement the scale "
                "subresource"
            )
        scales[id(controller)] = controller.replicas
    return sum(scales.values())


def expected_pod_count(spec: Mapping[str, Any], pods: Sequence[Pod]) -> tuple[int, int]:
    """getExpectedPodCount: (expectedCount, desiredHealthy). maxUnavailable and a percentage
    minAvailable read the controllers' scale; an integer minAvailable counts the pods."""
    if spec.get("maxUnavailable") is not None:
        expected = expected_scale(pods)
        return expected, max(0, expected - scaled_value(spec["maxUnavailable"], expected, True))
    if spec.get("minAvailable") is not None:
        minimum = spec["minAvailable"]
        if isinstance(minimum, int):
            return len(pods), minimum
        expected = expected_scale(pods)
        return expected, scaled_value(minimum, expected, True)
    return 0, 0


def sync(spec: Mapping[str, Any], pods: Sequence[Pod]) -> PdbStatus:
    """trySync then updatePdbStatus (no pods disrupted by earlier evictions), or failSafe:
    disruptionsAllowed 0 with the error as the SyncFailed condition's message."""
    try:
        expected, desired = expected_pod_count(spec, pods)
    except SyncFailed as error:
        return PdbStatus(0, 0, 0, 0, sync_failed=str(error))
    healthy = sum(1 for pod in pods if pod.ready and not pod.terminating)
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    return PdbStatus(allowed, healthy, desired, expected)
