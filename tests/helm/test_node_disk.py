"""Node disk per group: a pod with its own model cache (modelCache.type emptyDir) asks the
scheduler for the disk its group's fetch needs (the init container's ephemeral-storage request,
the emptyDir's sizeLimit), sized from what that group downloads (modelFetch.downloadMiB) rather
than one size for every pod, so a GPU node group's root volume and a scale-from-zero node
template can be sized per group."""

from __future__ import annotations

import math
import re

import pytest
import yaml

from tests.helm.kuberay_start import parse_quantity
from tests.helm.rendering import fetched_ids
from tests.helm.test_chart import CHART, HELM, objects, rayservice

VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
GIB = 2**30


def download_mib(downloads: dict, spec: str) -> int:
    """What one fetch spec (``[tokenizer:]owner/name@commit``) downloads, in MiB."""
    part = "tokenizer" if spec.startswith("tokenizer:") else "weights"
    return downloads[spec.removeprefix("tokenizer:").split("@")[0]][part]


@pytest.mark.parametrize("values", [None, "ci/external-stores.yaml"])
def test_each_fetching_pod_asks_for_what_its_group_downloads(values):
    cluster = rayservice(objects(str(HELM), CHART, values))["spec"]["rayClusterConfig"]
    downloads = VALUES["modelFetch"]["downloadMiB"]
    headroom = 1 + VALUES["modelCache"]["emptyDir"]["headroomPercent"] / 100
    sizes = {}
    for group in cluster["workerGroupSpecs"]:
        pod = group["template"]["spec"]
        if not pod.get("initContainers"):
            continue
        (init,) = pod["initContainers"]
        mib = sum(download_mib(downloads, spec) for spec in fetched_ids(init["args"]))
        request = init["resources"]["requests"]["ephemeral-storage"]
        (cache,) = [v for v in pod["volumes"] if v["name"] == "models"]
        assert cache["emptyDir"]["sizeLimit"] == request, group["groupName"]
        assert parse_quantity(request) == math.ceil(mib * headroom / 1024) * GIB
        sizes[group["groupName"]] = request
    # config/gpu.yaml: the dense group fetches the 8B model, the others a tokenizer of it and their own.
    assert sizes == {"cpu": "1Gi", "dense-gpu": "16Gi", "sparse-gpu": "3Gi", "llm-gpu": "9Gi"}
    assert sizes == documented_disk(), "docs/kubernetes.md states other sizes than the render's"


def documented_disk() -> dict[str, str]:
    """The node disk per group that docs/kubernetes.md states ("cpu 1 GiB (...), dense-gpu
    16 GiB ..."), as Kubernetes quantities."""
    text = " ".join((CHART.parents[1] / "docs" / "kubernetes.md").read_text().split())
    intro = text[text.index("asks for that much node disk") :][:400]
    found = re.findall(r"\b(cpu|dense-gpu|sparse-gpu|llm-gpu) (\d+) GiB", intro)
    return {group: f"{size}Gi" for group, size in found}
