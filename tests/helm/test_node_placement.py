"""Node selectors a cluster can provision for: every pod the chart renders selects nodes only by
labels a node has before it boots (from its node group's or node pool's template), so
cluster-autoscaler and Karpenter can scale a pool up from zero for a pending pod. Labels that a
DaemonSet sets on a booted node (NVIDIA GPU Feature Discovery's nvidia.com/gpu.product, Node
Feature Discovery's feature.node.kubernetes.io/*) are refused: no node would ever be added for
them unless the node template declares them too (docs/kubernetes.md, "Node placement")."""

from __future__ import annotations

import pytest

from tests.helm.test_chart import CHART, HELM, VALUES, objects

# Kubernetes' well-known labels that the kubelet or the cloud provider sets at registration,
# and the node-pool labels of EKS managed node groups, GKE node pools and Karpenter, which
# their autoscalers know for a group that has no node yet.
BEFORE_BOOT = {
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "eks.amazonaws.com/nodegroup",
    "eks.amazonaws.com/capacityType",
    "cloud.google.com/gke-nodepool",
    "cloud.google.com/gke-accelerator",
    "cloud.google.com/gke-spot",
    "cloud.google.com/machine-family",
    "karpenter.sh/nodepool",
    "karpenter.sh/capacity-type",
}
BEFORE_BOOT_PREFIXES = ("karpenter.k8s.aws/",)  # Karpenter's instance labels (instance-gpu-name)
AFTER_BOOT_PREFIXES = ("nvidia.com/", "feature.node.kubernetes.io/")  # GFD, NFD


def provisionable(node_selector: dict[str, str]) -> list[str]:
    """The keys of ``node_selector`` no autoscaler can provision a node for (empty: all can)."""
    return [
        key
        for key in node_selector
        if key.startswith(AFTER_BOOT_PREFIXES)
        or not (key in BEFORE_BOOT or key.startswith(BEFORE_BOOT_PREFIXES))
    ]


def pod_specs(docs: list[dict]) -> dict[str, dict]:
    specs = {}
    for doc in docs:
        if doc["kind"] == "RayService":
            cluster = doc["spec"]["rayClusterConfig"]
            specs["head"] = cluster["headGroupSpec"]["template"]["spec"]
            for group in cluster["workerGroupSpecs"]:
                specs[group["groupName"]] = group["template"]["spec"]
        elif doc["kind"] == "Job":
            specs[doc["metadata"]["name"]] = doc["spec"]["template"]["spec"]
    return specs


@pytest.mark.parametrize("values", VALUES, ids=lambda v: v or "defaults")
def test_every_pod_selects_nodes_an_autoscaler_can_add(values):
    for name, spec in pod_specs(objects(str(HELM), CHART, values)).items():
        assert provisionable(spec.get("nodeSelector") or {}) == [], (values, name)


def test_the_gpu_groups_of_the_production_values_select_instance_types():
    """ci/gpu-production.yaml: each GPU group on an EKS instance type with its GPU (g6e: L40S
    48 GB for the 8B dense model; g5: A10G 24 GB for SPLADE and the reranker), and it asks
    for the GPU itself (the device plugin's nvidia.com/gpu) and tolerates the GPU taint."""
    specs = pod_specs(objects(str(HELM), CHART, "ci/gpu-production.yaml"))
    expected = {"dense-gpu": "g6e.2xlarge", "sparse-gpu": "g5.2xlarge", "cpu": "m6i.2xlarge"}
    for group, instance_type in expected.items():
        assert specs[group]["nodeSelector"] == {"node.kubernetes.io/instance-type": instance_type}
    for group in ("dense-gpu", "sparse-gpu"):
        assert specs[group]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert {t["key"] for t in specs[group]["tolerations"]} == {"nvidia.com/gpu"}


@pytest.mark.parametrize(
    "selector,refused",
    [
        ({"nvidia.com/gpu.product": "NVIDIA-L40S"}, ["nvidia.com/gpu.product"]),
        ({"feature.node.kubernetes.io/pci-10de.present": "true"}, ["feature.node.kubernetes.io/pci-10de.present"]),
        ({"pool": "gpu"}, ["pool"]),  # a label nobody is known to put on the template
        ({"karpenter.k8s.aws/instance-gpu-name": "l40s"}, []),
        ({"cloud.google.com/gke-accelerator": "nvidia-l4"}, []),
        ({"eks.amazonaws.com/nodegroup": "gpu-l40s"}, []),
    ],
)  # fmt: skip
def test_the_check_refuses_labels_set_after_boot(selector, refused):
    assert provisionable(selector) == refused


def test_a_gfd_selector_in_values_is_caught():
    docs = objects(
        str(HELM),
        CHART,
        None,
        "--set",
        "workerGroups.denseGpu.nodeSelector.nvidia\\.com/gpu\\.product=NVIDIA-L40S",
    )
    assert provisionable(pod_specs(docs)["dense-gpu"]["nodeSelector"]) == ["nvidia.com/gpu.product"]


def term_matches(term: dict, labels: dict[str, str]) -> bool:
    """A nodeSelectorTerm's matchExpressions against a node's labels (Kubernetes' rules: all
    expressions must hold; Gt/Lt compare integers)."""
    for expression in term.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        value = labels.get(key)
        if operator == "In" and value not in values:
            return False
        if operator == "NotIn" and value in values:
            return False
        if operator == "Exists" and value is None:
            return False
        if operator == "DoesNotExist" and value is not None:
            return False
        if operator in ("Gt", "Lt"):
            if value is None or not value.lstrip("-").isdigit():
                return False
            if operator == "Gt" and not int(value) > int(values[0]):
                return False
            if operator == "Lt" and not int(value) < int(values[0]):
                return False
    return True


def required_terms(spec: dict) -> list[dict]:
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return required.get("nodeSelectorTerms") or []


# (node labels, GPU memory in GB of the node's GPU): what each cluster's node template declares.
NODES = [
    ({"node.kubernetes.io/instance-type": "g6e.2xlarge"}, 48),  # L40S
    ({"node.kubernetes.io/instance-type": "p4d.24xlarge"}, 40),  # A100 40 GB
    ({"node.kubernetes.io/instance-type": "g5.2xlarge"}, 24),  # A10G
    ({"node.kubernetes.io/instance-type": "g6.2xlarge"}, 24),  # L4
    ({"node.kubernetes.io/instance-type": "g4dn.xlarge"}, 16),  # T4
    ({"karpenter.k8s.aws/instance-gpu-memory": "45776"}, 48),
    ({"karpenter.k8s.aws/instance-gpu-memory": "22888"}, 24),
    ({"cloud.google.com/gke-accelerator": "nvidia-a100-80gb"}, 80),
    ({"cloud.google.com/gke-accelerator": "nvidia-l4"}, 24),
    ({"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}, 16),
    ({"serve-app.io/gpu-memory-gib": "80"}, 80),
    ({"serve-app.io/gpu-memory-gib": "24"}, 24),
    ({}, 0),  # a node that declares nothing
]


@pytest.mark.parametrize("values", [None, "ci/gpu-production.yaml"], ids=lambda v: v or "defaults")
def test_the_dense_group_lands_only_on_a_gpu_of_40_gb_or_more(values):
    """Qwen3-Embedding-8B in bf16 needs a GPU of 40 GB or more: the dense group's required node
    affinity admits exactly the nodes whose template says so, by labels known before boot."""
    spec = pod_specs(objects(str(HELM), CHART, values))["dense-gpu"]
    terms = required_terms(spec)
    assert terms
    for term in terms:
        keys = {e["key"]: "0" for e in term["matchExpressions"]}
        assert [k for k in provisionable(keys) if not k.startswith("serve-app.io/")] == []
    for labels, gigabytes in NODES:
        assert any(term_matches(t, labels) for t in terms) == (gigabytes >= 40), labels
