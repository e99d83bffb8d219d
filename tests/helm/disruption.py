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


def may_evict(spec: Mapping[str, Any], pods: Sequence[Pod], pod: Pod) -> bool:
    """The eviction subresource's decision for ``pod`` under the one budget selecting
    ``pods`` (``pkg/registry/core/pod/storage/eviction.go``, ``Create``): a terminating pod is
    deleted without the budget (``canIgnorePDB``); a pod that is not ready is deleted without
    spending the budget when ``unhealthyPodEvictionPolicy`` is ``AlwaysAllow``, or, under the
    default ``IfHealthyBudget``, when the budget is met (``currentHealthy >= desiredHealthy >
    0``); otherwise ``checkAndDecrement`` needs ``disruptionsAllowed > 0``."""
    if pod.terminating:
        return True
    status = sync(spec, pods)
    if not pod.ready:
        if spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            return True
        if status.current_healthy >= status.desired_healthy > 0:
            return True
    return status.disruptions_allowed > 0


@dataclass
class DrainResult:
    """What draining every node, one after the other, came to: ``blocked`` names the node and
    pods a drain could never get past (no eviction allowed and nothing left that could
    change it); ``fewest_ready`` is the fewest ready pods each group had at any moment."""

    blocked: str
    fewest_ready: dict[str, int]


def drain_every_node(
    groups: Mapping[str, tuple[Mapping[str, Any], int]],
    unready: Mapping[str, int] | None = None,
) -> DrainResult:
    """Drain the nodes of a layout one at a time as ``kubectl drain`` does (cordon, then evict
    each pod, retrying refused evictions), judged by :func:`may_evict`. ``groups`` maps a group
    to (its budget's spec, its pod count); each pod runs on a node of its own (one GPU, or a
    CPU request near a node's size). An evicted pod's RayCluster creates a replacement on a
    fresh node, which turns ready on the next retry round, except the ``unready`` pods of a
    group (crash-looping: never ready, replacements included). A drain that stays refused
    after every replacement is ready is blocked for good."""
    unready = unready or {}
    cluster: dict[str, list[Pod]] = {}
    for group, (_, count) in groups.items():
        broken = unready.get(group, 0)
        cluster[group] = [Pod(f"{group}-{i}", ready=i >= broken) for i in range(count)]
    fewest = {g: sum(p.ready for p in pods) for g, pods in cluster.items()}
    # Every pod that exists now sits on a node to drain; replacements land on new nodes.
    nodes = [(group, pod.name) for group, pods in cluster.items() for pod in pods]
    fresh = 0
    for group, name in nodes:
        spec = groups[group][0]
        while True:
            pods = cluster[group]
            (pod,) = [p for p in pods if p.name == name]
            if may_evict(spec, pods, pod):
                fresh += 1
                replacement = Pod(f"{group}-new-{fresh}", ready=False)
                cluster[group] = [p for p in pods if p.name != name] + [replacement]
                fewest[group] = min(fewest[group], sum(p.ready for p in cluster[group]))
                break
            waiting = [p for p in pods if not p.ready and unready.get(group, 0) == 0]
            if not waiting:
                return DrainResult(f"node of {name}: eviction refused for good", fewest)
            # The next retry round: the replacements have started and turned ready.
            cluster[group] = [Pod(p.name, ready=True) if p in waiting else p for p in pods]
        # After the node is done, the replacements of every group turn ready unless broken.
        for other, pods in cluster.items():
            if unready.get(other, 0) == 0:
                cluster[other] = [Pod(p.name, ready=True) for p in pods]
    return DrainResult("", fewest)
