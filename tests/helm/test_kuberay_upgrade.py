"""The port of KubeRay's upgrade rules (tests/helm/kuberay_upgrade.py) against KubeRay's own unit
tests in ``ray-operator/controllers/ray/rayservice_controller_unit_test.go`` at tag v1.7.0:
``TestGenerateHashWithoutReplicasAndWorkersToDelete``, ``TestIsClusterSpecHashEqual``,
``TestShouldPrepareNewCluster_*``, ``TestIsZeroDowntimeUpgradeEnabled`` and the
``shouldUpdateCluster`` decisions of ``TestReconcileRayCluster_UpdateActiveCluster`` /
``_UpdatePendingCluster``, each by its name, with its inputs and expected result."""

from __future__ import annotations

import copy

import pytest

from tests.helm.kuberay_upgrade import (
    HASH_KEY,
    KUBERAY_VERSION,
    KUBERAY_VERSION_KEY,
    NUM_WORKER_GROUPS_KEY,
    generate_hash_without_replicas_and_workers_to_delete,
    is_cluster_spec_hash_equal,
    is_zero_downtime_upgrade_enabled,
    should_prepare_new_cluster,
    should_update_cluster,
)

RAY_VERSION = "2.46.0"  # support.GetRayVersion(): any fixed version serves
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_generate_hash_without_replicas_and_workers_to_delete():
    spec = {
        "rayVersion": RAY_VERSION,
        "workerGroupSpecs": [
            {"template": {"spec": {}}, "replicas": 2, "minReplicas": 1, "maxReplicas": 4}
        ],
    }
    hash1 = generate_hash_without_replicas_and_workers_to_delete(spec)
    spec["workerGroupSpecs"][0]["replicas"] += 1
    assert generate_hash_without_replicas_and_workers_to_delete(spec) == hash1
    # RayVersion is not muted.
    spec["rayVersion"] = "2.100.0"
    assert generate_hash_without_replicas_and_workers_to_delete(spec) != hash1
    # Tolerations injected by external controllers (Kueue) do not change the hash.
    spec["rayVersion"] = RAY_VERSION
    spec["headGroupSpec"] = {"template": {"spec": {"tolerations": [GPU_TOLERATION]}}}
    spec["workerGroupSpecs"][0]["template"]["spec"]["tolerations"] = [GPU_TOLERATION]
    assert generate_hash_without_replicas_and_workers_to_delete(spec) == hash1
    # Nor do scheduling gates.
    del spec["headGroupSpec"]["template"]["spec"]["tolerations"]
    del spec["workerGroupSpecs"][0]["template"]["spec"]["tolerations"]
    gate = [{"name": "kueue.x-k8s.io/admission"}]
    spec["headGroupSpec"]["template"]["spec"]["schedulingGates"] = gate
    spec["workerGroupSpecs"][0]["template"]["spec"]["schedulingGates"] = gate
    assert generate_hash_without_replicas_and_workers_to_delete(spec) == hash1


def _cluster_for(rayservice: dict, with_version: bool = True) -> dict:
    spec = rayservice["spec"]["rayClusterConfig"]
    annotations = {
        HASH_KEY: generate_hash_without_replicas_and_workers_to_delete(spec),
        NUM_WORKER_GROUPS_KEY: str(len(spec.get("workerGroupSpecs") or [])),
    }
    if with_version:
        annotations[KUBERAY_VERSION_KEY] = KUBERAY_VERSION
    return {"metadata": {"annotations": annotations}, "spec": copy.deepcopy(spec)}


# TestIsClusterSpecHashEqual: (name, partial, diffReplicas, addNewWorkerGroup,
# updateClusterSpec, expected)
HASH_EQUAL_CASES = [
    ("[full] diff replicas", False, True, False, False, True),
    ("[full] completely identical", False, False, False, False, True),
    ("[full] update cluster spec", False, False, False, True, False),
    ("[partial] new worker group", True, False, True, False, True),
    ("[partial] diff replicas + new worker group", True, True, True, False, True),
    ("[partial] diff replicas", True, True, False, False, True),
    ("[partial] update cluster spec", True, False, False, True, False),
]


@pytest.mark.parametrize(
    "partial,diff_replicas,add_group,update_spec,expected",
    [case[1:] for case in HASH_EQUAL_CASES],
    ids=[case[0] for case in HASH_EQUAL_CASES],
)
def test_is_cluster_spec_hash_equal(partial, diff_replicas, add_group, update_spec, expected):
    rayservice = {
        "spec": {
            "rayClusterConfig": {
                "workerGroupSpecs": [{"groupName": "worker-group-1", "replicas": 1}]
            }
        }
    }
    cluster = _cluster_for(rayservice, with_version=False)
    groups = rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    if diff_replicas:
        groups[0]["replicas"] += 1
    if add_group:
        groups.append({"groupName": "worker-group-2", "replicas": 1})
    if update_spec:
        rayservice["spec"]["rayClusterConfig"]["rayVersion"] = "new-version"
    assert is_cluster_spec_hash_equal(rayservice, cluster, partial) is expected


def test_should_prepare_new_cluster_prepare_new_cluster():
    """Both clusters absent: the RayService was just created."""
    rayservice = {"metadata": {"name": "test-service", "namespace": "test-namespace"}}
    assert should_prepare_new_cluster(rayservice, None, None, False) is True


def test_should_prepare_new_cluster_zero_downtime_upgrade():
    rayservice = {"spec": {"rayClusterConfig": {"rayVersion": "old-version"}}}
    active = _cluster_for(rayservice)
    rayservice["spec"]["rayClusterConfig"]["rayVersion"] = "new-version"
    assert should_prepare_new_cluster(rayservice, active, None, False) is True


@pytest.mark.parametrize(
    "serving,expected",
    [(False, True), (True, False)],
    ids=[
        "override the pending cluster if it is not serving",
        "do not override the pending cluster if it is serving",
    ],
)
def test_should_prepare_new_cluster_pending_cluster(serving, expected):
    rayservice = {"spec": {"rayClusterConfig": {"rayVersion": "old-version"}}}
    pending = _cluster_for(rayservice)
    rayservice["spec"]["rayClusterConfig"]["rayVersion"] = "new-version"
    assert should_prepare_new_cluster(rayservice, None, pending, serving) is expected


NEW = {"type": "NewCluster"}
NONE = {"type": "None"}
# TestIsZeroDowntimeUpgradeEnabled: (name, upgradeStrategy, ENABLE_ZERO_DOWNTIME, expected)
ZERO_DOWNTIME_CASES = [
    ("both upgrade strategy and env var are not set", None, "", True),
    ("upgrade strategy is not set, but env var is set to true", None, "true", True),
    ("upgrade strategy is not set, but env var is set to false", None, "false", False),
    ("upgrade strategy is set to NewCluster", NEW, "", True),
    ("upgrade strategy is set to NewCluster, and env var is not set", NEW, "true", True),
    ("upgrade strategy is set to NewCluster, and env var is set to false", NEW, "false", True),
    ("upgrade strategy is set to RayServiceUpgradeNone, and env var is not set", NONE, "", False),
    (
        "upgrade strategy is set to RayServiceUpgradeNone, and env var is set to true",
        NONE,
        "true",
        False,
    ),
    (
        "upgrade strategy is set to RayServiceUpgradeNone, and env var is set to false",
        NONE,
        "false",
        False,
    ),
]


@pytest.mark.parametrize(
    "strategy,env,expected",
    [case[1:] for case in ZERO_DOWNTIME_CASES],
    ids=[case[0] for case in ZERO_DOWNTIME_CASES],
)
def test_is_zero_downtime_upgrade_enabled(strategy, env, expected):
    assert is_zero_downtime_upgrade_enabled(strategy, env) is expected


@pytest.mark.parametrize(
    "new_kuberay_version,add_group",
    [(True, False), (False, True)],
    ids=["Update KubeRay version", "Add new worker group"],
)
def test_reconcile_ray_cluster_update_active_cluster(new_kuberay_version, add_group):
    """TestReconcileRayCluster_UpdateActiveCluster: either change updates the active cluster
    (reconcileRayCluster calls shouldUpdateCluster(service, active, true)); unchanged, no
    update."""
    rayservice = {"spec": {"rayClusterConfig": {}}}
    active = _cluster_for(rayservice)
    assert should_update_cluster(rayservice, active, True) is False
    if new_kuberay_version:
        active["metadata"]["annotations"][KUBERAY_VERSION_KEY] = "new-version"
    if add_group:
        rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"] = [
            {"groupName": "new-worker-group"}
        ]
    assert should_update_cluster(rayservice, active, True) is True


def test_reconcile_ray_cluster_update_pending_cluster():
    """TestReconcileRayCluster_UpdatePendingCluster: an appended group updates the pending
    cluster in place (shouldUpdateCluster(service, pending, false))."""
    rayservice = {"spec": {"rayClusterConfig": {}}}
    pending = _cluster_for(rayservice)
    rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"] = [{"groupName": "new-worker-group"}]
    assert should_update_cluster(rayservice, pending, False) is True
    assert should_update_cluster(rayservice, None, False) is False
