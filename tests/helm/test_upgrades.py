"""`helm upgrade` reaches the pods on every store topology, judged with KubeRay v1.7.0's own rules
(tests/helm/kuberay_upgrade.py): the chart rendered before and after an image-tag change, an
environment change and a resource change, and what KubeRay does with the pair.

- Server stores (upgradeStrategy NewCluster): KubeRay starts a new RayCluster from the new
  spec, moves traffic when it is ready and deletes the old one.
- The embedded store (upgradeStrategy None: two clusters must never open its shard): KubeRay
  leaves the running RayCluster as it is and only submits the new serveConfigV2 to it. So the
  chart's guard, a pre-upgrade/pre-rollback hook Job (deployments/upgrade_guard.py), refuses
  such an upgrade or rollback and names the procedure that replaces the cluster. It reads
  the RayService's active RayCluster, which KubeRay created with the RayService's annotations
  (tests/helm/kuberay_upgrade.py: construct_ray_cluster), from a Kubernetes API double
  (tests/helm/test_secret_upgrade.py) holding what the "before" render produced; the Job runs
  as its pod would, with the rendered command and environment.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helm.kuberay_upgrade import (
    NEW_CLUSTER_PREPARED,
    NOTHING,
    construct_ray_cluster,
    generate_hash_without_replicas_and_workers_to_delete,
    pod_templates_differ,
    ray_cluster_spec_for_hashing,
    upgrade_outcome,
)
from tests.helm.test_chart import CHART, HELM, objects, rayservice
from tests.helm.test_secret_upgrade import NAMESPACE, FakeApiServer, helm_against

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = {
    "embedded store (defaults)": None,
    "embedded store (ci/cpu-small.yaml)": "ci/cpu-small.yaml",
    "server stores (ci/external-stores.yaml)": "ci/external-stores.yaml",
    "server stores (ci/gpu-production.yaml)": "ci/gpu-production.yaml",
}
CHANGES = {
    "image tag": ("--set", "image.tag=0.1.1"),
    "environment": ("--set-string", "config.serve.env.RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S=960"),
    "resources": (
        "--set", "workerGroups.cpu.resources.requests.memory=7Gi",
        "--set", "workerGroups.cpu.resources.limits.memory=7Gi",
    ),
}  # fmt: skip
RAYSERVICE_PATH = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayservices/rel-serve-app"


@functools.cache
def _render(values: str | None, extra: tuple[str, ...]) -> dict:
    return rayservice(objects(str(HELM), CHART, values, *extra))


def render(values: str | None, *extra: str) -> dict:
    return copy.deepcopy(_render(values, extra))


def embedded(values: str | None) -> bool:
    return values in (None, "ci/cpu-small.yaml")


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_what_kuberay_does_with_each_change(topology, change):
    values = TOPOLOGIES[topology]
    before, after = render(values), render(values, *CHANGES[change])
    assert pod_templates_differ(before, after)
    expected = NOTHING if embedded(values) else NEW_CLUSTER_PREPARED
    assert upgrade_outcome(before, after) == expected


@pytest.fixture(scope="module")
def kinds() -> set[tuple[str, str]]:
    """Every kind any values file renders (Helm checks each against discovery)."""
    return {
        (d["apiVersion"], d["kind"])
        for values in TOPOLOGIES.values()
        for d in objects(str(HELM), CHART, values)
    }


CLUSTER_NAME = "rel-serve-app-x7k2p"  # KubeRay names a RayService's cluster with a suffix
RAYCLUSTER_PATH = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayclusters/{CLUSTER_NAME}"


def running_objects(running: dict) -> dict[str, dict]:
    """The API's objects for a RayService ``running`` (as the previous release left it) and
    the RayCluster KubeRay created from it (constructRayClusterForRayService: the RayService's
    annotations copied), active in the RayService's status."""
    stored = copy.deepcopy(running)
    stored["metadata"].setdefault("annotations", {}).update(
        {"meta.helm.sh/release-name": "rel", "meta.helm.sh/release-namespace": NAMESPACE}
    )
    stored["status"] = {"activeServiceStatus": {"rayClusterName": CLUSTER_NAME}}
    return {RAYSERVICE_PATH: stored, RAYCLUSTER_PATH: construct_ray_cluster(stored, CLUSTER_NAME)}


def guard_job(docs: list[dict]) -> dict:
    (job,) = [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("-guard")]
    return job


def run_guard(job: dict, server: FakeApiServer) -> subprocess.CompletedProcess:
    """The hook Job's container as the pod runs it: its command and environment, the API
    reached at ``server`` instead of the in-cluster address."""
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    env.update(PATH=os.environ["PATH"], PYTHONPATH=str(ROOT), SERVE_APP_GUARD_API=server.url)
    command = [sys.executable if c == "python" else c for c in container["command"]]
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)


def helm_upgrade(kinds, tmp_path, values, running: dict | None, *extra: str, chart=CHART):
    """An upgrade to the render of ``values`` + ``extra`` with ``running`` in the cluster: the
    guard's hook Job run against the API double (its result), and the RayService `helm
    upgrade` renders there (its stdout: NOTES' lookup sees the running RayService)."""
    server = FakeApiServer(kinds, {}, running_objects(running) if running else {})
    args = ("-f", str(CHART / values)) if values else ()
    try:
        rendered = helm_against(
            server, tmp_path, *args, *extra, "-s", "templates/upgrade-guard.yaml",
            show_only="templates/rayservice.yaml", chart=chart,
        )  # fmt: skip
        assert rendered.returncode == 0, rendered.stderr
        docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
        guard = run_guard(guard_job(docs), server)
        (service,) = [d for d in docs if d["kind"] == "RayService"]
        done = subprocess.CompletedProcess(
            guard.args, guard.returncode, yaml.safe_dump(service), guard.stdout + guard.stderr
        )
        return done, server.requests
    finally:
        server.close()


@pytest.mark.parametrize(
    "topology,change",
    [("embedded store (defaults)", change) for change in CHANGES]
    + [("embedded store (ci/cpu-small.yaml)", "image tag")],
)
def test_an_embedded_store_upgrade_that_would_not_reach_the_pods_is_refused(
    kinds, tmp_path, topology, change
):
    values = TOPOLOGIES[topology]
    running = render(values)
    done, requests = helm_upgrade(kinds, tmp_path, values, running, *CHANGES[change])
    assert RAYSERVICE_PATH in requests and RAYCLUSTER_PATH in requests  # what runs was read
    assert done.returncode != 0, "the upgrade would leave the running pods unchanged"
    message = " ".join(done.stderr.split())
    for words in (
        "KubeRay v1.7.0 keeps the running pods",
        f"kubectl -n {NAMESPACE} delete rayservice rel-serve-app --cascade=foreground",
        f"kubectl -n {NAMESPACE} wait --for=delete pod --timeout=20m "
        "-l app.kubernetes.io/name=serve-app,app.kubernetes.io/instance=rel",
        "the claim rel-serve-app-data is kept",
        "then run this helm upgrade (or rollback) again",
    ):
        assert words in message, message


@pytest.mark.parametrize("values", [v for v in TOPOLOGIES.values() if embedded(v)])
def test_an_embedded_store_upgrade_of_the_serve_config_alone_proceeds(kinds, tmp_path, values):
    """No pod template changes (a search setting): KubeRay submits the new serveConfigV2 to the
    running cluster; nothing to refuse. A first install (nothing running) proceeds too."""
    running = render(values)
    change = ("--set", "config.search.top_k=11")
    assert not pod_templates_differ(running, render(values, *change))
    done, _ = helm_upgrade(kinds, tmp_path, values, running, *change)
    assert done.returncode == 0, done.stderr
    first, _ = helm_upgrade(kinds, tmp_path, values, None, *CHANGES["image tag"])
    assert first.returncode == 0, first.stderr


def test_a_running_service_from_an_older_chart_is_refused_too(kinds, tmp_path):
    """A RayService without the chart's cluster-spec annotation (an older chart) cannot be
    shown to run the new templates: refused, with the same procedure."""
    running = render(None)
    del running["metadata"]["annotations"]["serve-app/cluster-spec-sha256"]
    done, _ = helm_upgrade(kinds, tmp_path, None, running)  # its RayCluster lacks it too
    assert done.returncode != 0 and "--cascade=foreground" in done.stderr


@pytest.mark.parametrize("values", [v for v in TOPOLOGIES.values() if not embedded(v)])
def test_server_store_upgrades_proceed(kinds, tmp_path, values):
    running = render(values)
    done, _ = helm_upgrade(kinds, tmp_path, values, running, *CHANGES["image tag"])
    assert done.returncode == 0, done.stderr


def test_the_upgrade_table_in_the_docs_is_what_kuberay_does():
    """docs/kubernetes.md's table: one row per change, the outcome per topology."""
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    for change in CHANGES:
        row = re.search(rf"^\| {change} \|(.*)\|$", text, re.MULTILINE)
        assert row, change
        cells = [c.strip() for c in row.group(1).split("|")]
        embedded_cell, server_cell = cells[0], cells[1]
        assert f"KubeRay {NOTHING}" in embedded_cell and "refused" in embedded_cell, cells
        assert f"KubeRay {NEW_CLUSTER_PREPARED}" in server_cell, cells


def reworded_chart(tmp_path: Path) -> Path:
    """A copy of the chart whose only change is the wording of a YAML comment inside
    rayClusterConfig (the rendered text changes, the data does not)."""
    import shutil

    copy_ = tmp_path / "chart"
    shutil.copytree(CHART, copy_)
    template = copy_ / "templates" / "rayservice.yaml"
    text = template.read_text()
    old = "# no actors on the head: it runs GCS, dashboard and the autoscaler"
    assert old in text
    template.write_text(text.replace(old, "# the head runs GCS, dashboard and autoscaler only"))
    return copy_


GUARD_CASES = {
    "comment reworded": (),
    "maxReplicas": ("--set", "workerGroups.cpu.maxReplicas=7"),
    "minReplicas and replicas": (
        "--set", "workerGroups.denseGpu.minReplicas=0", "--set", "workerGroups.denseGpu.replicas=0",
    ),
    "toleration": ("--set-json", 'workerGroups.cpu.tolerations=[{"key": "spot", "operator": "Exists"}]'),
    "image tag": ("--set", "image.tag=0.1.1"),
}  # fmt: skip


def kuberay_sees_a_change(before: dict, after: dict) -> bool:
    """Whether KubeRay v1.7.0's hash (tests/helm/kuberay_upgrade.py, its Go rule) differs."""
    return generate_hash_without_replicas_and_workers_to_delete(
        ray_cluster_spec_for_hashing(before)
    ) != generate_hash_without_replicas_and_workers_to_delete(ray_cluster_spec_for_hashing(after))


@pytest.mark.parametrize("case", GUARD_CASES)
def test_the_guard_decides_as_kuberay_does(kinds, tmp_path, case):
    """The embedded store's guard, beside KubeRay's own decision for the same pair: refused
    exactly when KubeRay's hash changes (it would leave the pods as they are); a change of
    fields KubeRay mutes only is let through with the RayService saying it is not applied
    (NOTES prints the same); a reworded comment is no change at all (the guard hashed the
    rendered text before, and refused it)."""
    running = render(None)
    chart = reworded_chart(tmp_path) if case == "comment reworded" else CHART
    after = rayservice(objects(str(HELM), chart, None, *GUARD_CASES[case]))
    changed = kuberay_sees_a_change(running, after)
    assert changed is (case == "image tag")
    done, _ = helm_upgrade(kinds, tmp_path, None, running, *GUARD_CASES[case], chart=chart)
    assert (done.returncode != 0) is changed, done.stderr
    if changed:
        return
    annotations = yaml.safe_load(done.stdout)["metadata"]["annotations"]
    muted_only = case != "comment reworded"
    assert ("serve-app/not-applied" in annotations) is muted_only, annotations
    assert ("WARNING" in done.stderr and "KubeRay applies none" in done.stderr) is muted_only


def test_a_rollback_to_pods_that_no_longer_run_is_refused(kinds, tmp_path):
    """(was: `helm rollback` renders nothing, so the lookup guard never ran and the RayService
    then described pods that did not run) Release 1 ran the defaults; release 2 changed the
    image through the replace procedure, so the running cluster is release 2's. `helm
    rollback` to release 1 runs release 1's pre-rollback hooks: the guard reads the active
    RayCluster, finds release 2's spec and refuses. A rollback to the running spec proceeds."""
    release_2 = render(None, *CHANGES["image tag"])
    job = guard_job(objects(str(HELM), CHART, None))  # release 1's hook, as Helm stored it
    assert set(job["metadata"]["annotations"]["helm.sh/hook"].split(",")) >= {"pre-rollback"}
    server = FakeApiServer(kinds, {}, running_objects(release_2))
    try:
        refused = run_guard(job, server)
        same = run_guard(guard_job(objects(str(HELM), CHART, None, *CHANGES["image tag"])), server)
    finally:
        server.close()
    assert refused.returncode == 1 and "--cascade=foreground" in refused.stderr, refused.stderr
    assert same.returncode == 0, same.stderr


def test_the_guard_reads_the_running_cluster_with_get_only(kinds, tmp_path):
    """Its own ServiceAccount, Role and RoleBinding, hooks created before it; the Role may get
    this release's RayService and the RayClusters (KubeRay suffixes their names), nothing else.
    The Job runs before the model fetch: a refused upgrade downloads nothing. Argo CD runs
    pre-upgrade hooks as PreSync, its first sync too: with nothing running the guard passes."""
    docs = objects(str(HELM), CHART, "ci/external-stores.yaml", "--set", "modelCache.type=pvc",
                   "--set", "modelCache.existingClaim=models")  # fmt: skip
    hooks = {d["kind"]: d for d in docs if d["metadata"]["name"] == "rel-serve-app-upgrade-guard"}
    assert set(hooks) == {"ServiceAccount", "Role", "RoleBinding", "Job"}
    weight = {k: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for k, d in hooks.items()}
    (fetch,) = [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("-fetch")]
    assert (
        weight["Role"]
        < weight["Job"]
        < int(fetch["metadata"]["annotations"]["helm.sh/hook-weight"])
    )
    for doc in hooks.values():
        assert doc["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade,pre-rollback"
    assert hooks["Role"]["rules"] == [
        {"apiGroups": ["ray.io"], "resources": ["rayservices"],
         "resourceNames": ["rel-serve-app"], "verbs": ["get"]},
        {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["get"]},
    ]  # fmt: skip
    assert (
        hooks["RoleBinding"]["subjects"][0]["name"] == hooks["ServiceAccount"]["metadata"]["name"]
    )
    pod = hooks["Job"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == hooks["ServiceAccount"]["metadata"]["name"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    assert env["SERVE_APP_GUARD_STRATEGY"] == "NewCluster"
    server = FakeApiServer(kinds, {})
    try:
        first_sync = run_guard(hooks["Job"], server)
    finally:
        server.close()
    assert first_sync.returncode == 0 and "nothing to compare" in first_sync.stdout
    off = objects(str(HELM), CHART, None, "--set", "upgradeGuard.enabled=false")
    assert not [d for d in off if "upgrade-guard" in d["metadata"]["name"]]
