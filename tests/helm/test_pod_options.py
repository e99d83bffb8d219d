"""Pod options operators set per group or for the image: a digest instead of a tag, and the
scheduling extras (priority class, runtime class, topology spread), rendered where asked and
valid for KubeRay v1.7.0's CRD; and the warning for a nameless service account."""

from __future__ import annotations

import pytest
import yaml

from tests.helm import rendering
from tests.helm.test_chart import (
    CHART,
    HELM,
    IMAGE,
    SET_IMAGE,
    objects,
    rayservice,
    render,
    validate_rayservice,
)

DIGEST = "sha256:" + "0123456789abcdef" * 4
APP_VERSION = str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])


def pod_specs(docs: list[dict]) -> dict[str, dict]:
    cluster = rayservice(docs)["spec"]["rayClusterConfig"]
    specs = {"head": cluster["headGroupSpec"]["template"]["spec"]}
    specs.update({g["groupName"]: g["template"]["spec"] for g in cluster["workerGroupSpecs"]})
    return specs


def images(docs: list[dict]) -> set[str]:
    """Every container image the chart renders (Ray pods, hook Jobs, init containers)."""
    found = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("image"), str) and "containers" not in node:
                found.add(node["image"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(docs)
    return found


@pytest.mark.parametrize("values", [None, "ci/gpu-production.yaml"])
def test_a_digest_pins_every_container_to_one_image(values):
    extra = ("--set", f"image.digest={DIGEST}", "--set", "modelCache.type=pvc",
             "--set", "modelCache.storageClass=efs-sc")  # fmt: skip
    docs = objects(str(HELM), CHART, values, *extra)
    assert images(docs) == {f"{IMAGE}@{DIGEST}"}
    assert images(objects(str(HELM), CHART, values)) == {f"{IMAGE}:{APP_VERSION}"}


@pytest.mark.parametrize("digest", ["sha256:abc", "latest", "sha512:" + "0" * 128])
def test_anything_but_a_sha256_digest_is_refused(digest):
    done = render(str(HELM), CHART, None, "--set", f"image.digest={digest}")
    assert done.returncode != 0 and "digest" in done.stderr


def test_scheduling_extras_go_on_the_groups_that_ask_for_them():
    spread = (
        '[{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", '
        '"whenUnsatisfiable": "ScheduleAnyway", '
        '"labelSelector": {"matchLabels": {"serve-app/group": "dense-gpu"}}}]'
    )
    docs = objects(
        str(HELM), CHART, "ci/gpu-production.yaml",
        "--set", "workerGroups.denseGpu.priorityClassName=serving-gpu",
        "--set", "workerGroups.denseGpu.runtimeClassName=nvidia",
        "--set-json", f"workerGroups.denseGpu.topologySpreadConstraints={spread}",
        "--set", "head.priorityClassName=system-cluster-critical",
    )  # fmt: skip
    validate_rayservice(rayservice(docs))
    specs = pod_specs(docs)
    dense = specs.pop("dense-gpu")
    assert (dense["priorityClassName"], dense["runtimeClassName"]) == ("serving-gpu", "nvidia")
    (constraint,) = dense["topologySpreadConstraints"]
    labels = rayservice(docs)["spec"]["rayClusterConfig"]["workerGroupSpecs"][1]
    assert labels["groupName"] == "dense-gpu"
    matched = constraint["labelSelector"]["matchLabels"].items()
    assert matched <= labels["template"]["metadata"]["labels"].items()
    assert specs.pop("head")["priorityClassName"] == "system-cluster-critical"
    for name, spec in specs.items():
        assert not {"priorityClassName", "runtimeClassName", "topologySpreadConstraints"} & set(
            spec
        ), name


@pytest.mark.parametrize(
    "extra,warned",
    [
        ((), False),
        (("--set", "serviceAccount.create=false"), True),
        (("--set", "serviceAccount.create=false", "--set", "serviceAccount.name=ray"), False),
    ],
    ids=["created", "nameless", "named"],
)
def test_a_nameless_service_account_is_warned_about(extra, warned):
    args = [str(HELM), "install", "rel", str(CHART), "--dry-run=client", "--namespace", "search",
            *SET_IMAGE, *extra]  # fmt: skip
    done = rendering.helm(*args)
    assert done.returncode == 0, done.stderr
    notes = " ".join(done.stdout.split("NOTES:", 1)[1].split())
    assert ('pods run as the namespace\'s "default" account' in notes) is warned, notes
    if warned:
        assert "KubeRay binds its autoscaler Role" in notes  # the autoscaler is on by default


@pytest.mark.parametrize(
    "values,gpus", [("ci/gpu-production.yaml", 6), ("ci/external-stores.yaml", None)]
)
def test_notes_say_what_a_new_cluster_upgrade_takes(values, gpus):
    """Server stores upgrade through a second cluster started at the groups' starting
    replicas: NOTES give its GPUs (the render's own pods x GPUs per pod) and how long both
    clusters run side by side; the embedded store (no second cluster) says nothing of it."""
    args = [str(HELM), "install", "rel", str(CHART), "--dry-run=client", "--namespace", "search",
            *SET_IMAGE, "-f", str(CHART / values)]  # fmt: skip
    done = rendering.helm(*args)
    assert done.returncode == 0, done.stderr
    notes = " ".join(done.stdout.split("NOTES:", 1)[1].split())
    docs = objects(str(HELM), CHART, values)
    spec = rayservice(docs)["spec"]
    groups = spec["rayClusterConfig"]["workerGroupSpecs"]
    rendered = sum(
        g["replicas"] * int(g["template"]["spec"]["containers"][0]["resources"].get(
            "limits", {}).get("nvidia.com/gpu", 0))
        for g in groups
    )  # fmt: skip
    assert gpus is None or rendered == gpus
    delay = spec["rayClusterDeletionDelaySeconds"]
    assert f"{rendered} GPUs more" in notes and f"held until {delay} s after traffic" in notes


def test_the_embedded_store_names_no_second_cluster():
    args = [str(HELM), "install", "rel", str(CHART), "--dry-run=client", "--namespace", "search",
            *SET_IMAGE]  # fmt: skip
    done = rendering.helm(*args)
    assert done.returncode == 0, done.stderr
    assert "starts a second cluster" not in " ".join(done.stdout.split())


@pytest.mark.parametrize("values", [None, "ci/cpu-small.yaml", "ci/gpu-production.yaml"])
def test_each_ray_pods_tmp_is_bounded(values):
    """(was: an emptyDir without a limit and Ray's 512 MiB x 5 per log file) /tmp holds Ray's
    session (logs, spilled objects): every Ray pod's has the sizeLimit, and every Ray container
    the log rotation, under the names Ray's own node start-up reads."""
    import inspect

    from ray._private import node

    source = inspect.getsource(node)
    for name in ("RAY_ROTATION_MAX_BYTES", "RAY_ROTATION_BACKUP_COUNT"):
        assert f'os.getenv("{name}"' in source, name  # the consumer's own reading
    docs = objects(str(HELM), CHART, values, "--set", "rayTmp.sizeLimit=12Gi")
    for group, spec in pod_specs(docs).items():
        (tmp,) = [v for v in spec["volumes"] if v["name"] == "tmp"]
        assert tmp["emptyDir"] == {"sizeLimit": "12Gi"}, group
        for container in spec["containers"]:
            if container["name"].startswith("ray-"):
                env = {e["name"]: e.get("value") for e in container["env"]}
                assert env["RAY_ROTATION_MAX_BYTES"] == "104857600", group
                assert env["RAY_ROTATION_BACKUP_COUNT"] == "3", group
