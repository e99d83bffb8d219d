"""What KubeRay v1.7.0 does with a RayService whose spec changed: the rules of its RayService
controller, ported from the Go source, and applied to a chart's rendered before and after.

Sources (tag v1.7.0 of github.com/ray-project/kuberay):

- ``ray-operator/controllers/ray/rayservice_controller.go``: ``shouldUpdateCluster`` (update the
  running RayCluster in place), ``shouldPrepareNewCluster`` (start a new RayCluster beside it),
  ``isClusterSpecHashEqual``, ``isZeroDowntimeUpgradeEnabled``, ``rayClusterSpecForHashing``
  and ``constructRayClusterForRayService`` (the annotations a RayCluster carries);
- ``ray-operator/controllers/ray/utils/util.go``: ``GenerateHashWithoutReplicasAndWorkersToDelete``
  (the spec hash with the fields KubeRay ignores muted) and ``GenerateJsonHash``.

The rules are ported, not the code. ``tests/helm/test_kuberay_upgrade.py`` holds the port to
KubeRay's own cases (``rayservice_controller_unit_test.go``). One difference is deliberate: Go
hashes ``json.Marshal`` of its typed struct (fields in declaration order, ``omitempty`` fields
dropped); here the hash is of the canonical JSON of the same object (keys sorted, empty values
dropped, container quantities canonical), so two specs hash equal here exactly when they do in
KubeRay, although the strings differ from KubeRay's annotation.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from tests.helm.kuberay_start import parse_quantity

HASH_KEY = "ray.io/hash-without-replicas-and-workers-to-delete"
NUM_WORKER_GROUPS_KEY = "ray.io/num-worker-groups"
KUBERAY_VERSION_KEY = "ray.io/kuberay-version"
KUBERAY_VERSION = "v1.7.0"
NEW_CLUSTER = "NewCluster"
NEW_CLUSTER_WITH_INCREMENTAL_UPGRADE = "NewClusterWithIncrementalUpgrade"

# What KubeRay does with a running RayService after its spec changed (upgrade_outcome).
UPDATED_IN_PLACE = "updates the RayCluster in place"
NEW_CLUSTER_PREPARED = "starts a new RayCluster, moves traffic, deletes the old one"
NOTHING = "leaves the RayCluster as it is"

Object = dict[str, Any]


def _canonical(node: Any, key: str = "") -> Any:
    """The object as Go's json.Marshal would distinguish it: empty (omitempty) values dropped,
    container requests/limits as canonical quantities ("4" and 4 are one Quantity)."""
    if isinstance(node, Mapping):
        out = {}
        for name, value in node.items():
            if key in ("requests", "limits"):
                value = str(parse_quantity(value).normalize())
            value = _canonical(value, name)
            if value not in (None, {}, [], ""):
                out[name] = value
        return out
    if isinstance(node, list):
        return [_canonical(item) for item in node]
    return node


def generate_json_hash(obj: Any) -> str:
    """GenerateJsonHash: SHA-1 of the JSON, base32 (extended hex alphabet) with padding."""
    serial = json.dumps(_canonical(obj), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha1(serial.encode(), usedforsecurity=False).digest()
    return base64.b32hexencode(digest).decode()


def generate_hash_without_replicas_and_workers_to_delete(cluster_spec: Mapping[str, Any]) -> str:
    """GenerateHashWithoutReplicasAndWorkersToDelete: the RayCluster spec's hash with what the
    autoscaler and external controllers (Kueue) change muted: every worker group's replicas,
    minReplicas, maxReplicas and scaleStrategy.workersToDelete, every pod template's
    tolerations and schedulingGates (head too), and the spec's upgradeStrategy."""
    spec = copy.deepcopy(dict(cluster_spec))
    head_pod = ((spec.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}
    head_pod.pop("tolerations", None)
    head_pod.pop("schedulingGates", None)
    for group in spec.get("workerGroupSpecs") or []:
        for name in ("replicas", "minReplicas", "maxReplicas"):
            group.pop(name, None)
        (group.get("scaleStrategy") or {}).pop("workersToDelete", None)
        pod = (group.get("template") or {}).get("spec") or {}
        pod.pop("tolerations", None)
        pod.pop("schedulingGates", None)
    spec.pop("upgradeStrategy", None)
    return generate_json_hash(spec)


def ray_cluster_spec_for_hashing(rayservice: Mapping[str, Any]) -> Object:
    """rayClusterSpecForHashing: a copy of the RayService's rayClusterConfig without suspend."""
    spec = copy.deepcopy(dict((rayservice.get("spec") or {}).get("rayClusterConfig") or {}))
    spec.pop("suspend", None)
    return spec


def construct_ray_cluster(rayservice: Mapping[str, Any], name: str) -> Object:
    """constructRayClusterForRayService, the parts the rules read: the RayService's annotations
    plus the spec hash, the number of worker groups and the KubeRay version; the spec copied."""
    metadata = rayservice.get("metadata") or {}
    spec = copy.deepcopy(dict((rayservice.get("spec") or {}).get("rayClusterConfig") or {}))
    annotations = dict(metadata.get("annotations") or {})
    annotations[HASH_KEY] = generate_hash_without_replicas_and_workers_to_delete(
        ray_cluster_spec_for_hashing(rayservice)
    )
    annotations[NUM_WORKER_GROUPS_KEY] = str(len(spec.get("workerGroupSpecs") or []))
    annotations[KUBERAY_VERSION_KEY] = KUBERAY_VERSION
    return {
        "metadata": {
            "name": name,
            "namespace": metadata.get("namespace"),
            "annotations": annotations,
        },
        "spec": spec,
    }


def condition_true(rayservice: Mapping[str, Any], condition: str) -> bool:
    """meta.IsStatusConditionTrue on the RayService's status conditions."""
    conditions = (rayservice.get("status") or {}).get("conditions") or []
    return any(c.get("type") == condition and c.get("status") == "True" for c in conditions)


def is_cluster_spec_hash_equal(
    rayservice: Mapping[str, Any], cluster: Mapping[str, Any], partial: bool
) -> bool:
    """isClusterSpecHashEqual: the cluster's hash annotation against the RayService's spec; with
    ``partial`` only the first ``ray.io/num-worker-groups`` groups of the RayService count (new
    groups appended at the end), and a RayService with fewer groups never matches. An
    unreadable group count counts as equal (KubeRay returns true on that error)."""
    annotations = (cluster.get("metadata") or {}).get("annotations") or {}
    cluster_hash = annotations.get(HASH_KEY, "")
    goal = ray_cluster_spec_for_hashing(rayservice)
    goal_hash = ""
    if not partial:
        goal_hash = generate_hash_without_replicas_and_workers_to_delete(goal)
    else:
        try:
            cluster_groups = int(annotations.get(NUM_WORKER_GROUPS_KEY, ""))
        except ValueError:
            return True
        groups = goal.get("workerGroupSpecs") or []
        if len(groups) >= cluster_groups:
            goal["workerGroupSpecs"] = groups[:cluster_groups]
            goal_hash = generate_hash_without_replicas_and_workers_to_delete(goal)
    return cluster_hash == goal_hash


def should_update_cluster(
    rayservice: Mapping[str, Any], cluster: Mapping[str, Any] | None, is_active_cluster: bool
) -> bool:
    """shouldUpdateCluster: update a RayCluster in place only when its KubeRay version changed
    (the active cluster, outside an upgrade) or when the spec differs by worker groups appended
    at the end; never the active cluster during an upgrade."""
    if cluster is None:
        return False
    if is_active_cluster:
        if condition_true(rayservice, "UpgradeInProgress"):
            return False
        annotations = (cluster.get("metadata") or {}).get("annotations") or {}
        if annotations.get(KUBERAY_VERSION_KEY) != KUBERAY_VERSION:
            return True
    if is_cluster_spec_hash_equal(rayservice, cluster, partial=False):
        return False
    return is_cluster_spec_hash_equal(rayservice, cluster, partial=True)


def is_zero_downtime_upgrade_enabled(
    upgrade_strategy: Mapping[str, Any] | None,
    enable_zero_downtime_env: str = "",
    incremental_upgrade_gate: bool = True,
) -> bool:
    """isZeroDowntimeUpgradeEnabled: the RayService's upgradeStrategy.type wins (NewCluster, and
    NewClusterWithIncrementalUpgrade while the RayServiceIncrementalUpgrade feature gate is on,
    as it is by default in v1.7.0); unset, the operator's ENABLE_ZERO_DOWNTIME decides (only
    "false" turns it off)."""
    upgrade_type = (upgrade_strategy or {}).get("type")
    if upgrade_type is not None:
        allowed = {NEW_CLUSTER}
        if incremental_upgrade_gate:
            allowed.add(NEW_CLUSTER_WITH_INCREMENTAL_UPGRADE)
        return upgrade_type in allowed
    return enable_zero_downtime_env.lower() != "false"


def should_prepare_new_cluster(
    rayservice: Mapping[str, Any],
    active_cluster: Mapping[str, Any] | None,
    pending_cluster: Mapping[str, Any] | None,
    is_pending_cluster_serving: bool,
    enable_zero_downtime_env: str = "",
) -> bool:
    """shouldPrepareNewCluster: a new RayCluster when there is none, or when the spec changed
    beyond appended worker groups and zero-downtime upgrades are enabled; never while the
    pending cluster serves or a rollback runs."""
    if is_pending_cluster_serving or condition_true(rayservice, "RollbackInProgress"):
        return False
    if active_cluster is None and pending_cluster is None:
        return True
    cluster = pending_cluster if pending_cluster is not None else active_cluster
    assert cluster is not None
    if is_cluster_spec_hash_equal(rayservice, cluster, partial=False):
        return False
    if is_cluster_spec_hash_equal(rayservice, cluster, partial=True):
        return False
    return is_zero_downtime_upgrade_enabled(
        (rayservice.get("spec") or {}).get("upgradeStrategy"), enable_zero_downtime_env
    )


def upgrade_outcome(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """What KubeRay v1.7.0 does when a RayService running ``before`` (its active RayCluster built
    from it, no upgrade in progress) is replaced by ``after``: reconcileRayCluster's in-place
    update, calculateStatus' new pending cluster, or nothing. With nothing, KubeRay still
    submits ``after``'s serveConfigV2 to the running cluster (reconcileServe on the active
    cluster runs when no new cluster is prepared): the Serve configuration changes, the pods
    do not."""
    active = construct_ray_cluster(before, "active")
    if should_update_cluster(after, active, is_active_cluster=True):
        return UPDATED_IN_PLACE
    if should_prepare_new_cluster(after, active, None, is_pending_cluster_serving=False):
        return NEW_CLUSTER_PREPARED
    return NOTHING


def pod_templates_differ(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether any pod template of the two RayServices' clusters differs (what a pod runs)."""

    def templates(rayservice: Mapping[str, Any]) -> list[Any]:
        spec = (rayservice.get("spec") or {}).get("rayClusterConfig") or {}
        groups = [spec.get("headGroupSpec") or {}, *(spec.get("workerGroupSpecs") or [])]
        return [_canonical(g.get("template")) for g in groups]

    return templates(before) != templates(after)
