"""The rendered RayService checked with the code that runs it: the `ray start` line KubeRay
v1.7.0 builds for each group (tests/helm/kuberay_start.py, ported from its Go source and held to
its own unit tests) read by Ray's own `ray start` CLI, Ray's KubeRay autoscaler config
derivation, and Ray's bin-packing scheduler (both ship in the ray wheel).

Two readers of one group spec: the raylet advertises what KubeRay's line says, the autoscaler
provisions what its own derivation says. Replicas are placed on the former, so placement is
packed into the raylets' resources, and the two must be equal or the autoscaler scales groups
for replicas that can never land there."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.kuberay.autoscaling_config import (
    _derive_autoscaling_config_from_ray_cr,
)
from ray.autoscaler._private.resource_demand_scheduler import get_bin_pack_residual

from deployments.replicas.options import replica_bundle
from tests.helm import rendering
from tests.helm.kuberay_start import HEAD, WORKER, group_ray_start_command, raylet_resources
from tests.helm.test_chart import SET_IMAGE

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "serve-app"
HELM = ROOT / ".cache" / "bin" / "helm"
VALUES = [None, "ci/cpu-small.yaml", "ci/gpu-production.yaml", "ci/external-stores.yaml"]


def rendered_rayservice(values: str | None) -> dict:
    args = [str(HELM), "template", "rel", str(CHART), "--namespace", "search", *SET_IMAGE]
    if values:
        args += ["-f", str(CHART / values)]
    (service,) = [d for d in rendering.documents(*args) if d["kind"] == "RayService"]
    return service


def as_raycluster(service: dict) -> dict:
    """The RayCluster KubeRay creates from the RayService (what the autoscaler reads)."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": service["metadata"]["name"], "namespace": "search"},
        "spec": service["spec"]["rayClusterConfig"],
    }


def deployment_demands(service: dict) -> list[tuple[str, dict, int]]:
    """(deployment, resource bundle of one replica, replicas at the autoscaling maximum)."""
    serve_config = yaml.safe_load(service["spec"]["serveConfigV2"])
    demands = []
    for app in serve_config["applications"]:
        for deployment in app["deployments"]:
            bundle = replica_bundle(deployment.get("ray_actor_options", {}))
            demands.append((deployment["name"], bundle, max_replicas(deployment)))
    return demands


def max_replicas(deployment: dict) -> int:
    autoscaling = deployment.get("autoscaling_config") or {}
    return int(autoscaling.get("max_replicas", deployment.get("num_replicas", 1)))


@pytest.fixture(scope="module", params=VALUES, ids=lambda v: v or "defaults")
def cluster(request) -> tuple[dict, dict]:
    service = rendered_rayservice(request.param)
    return service, _derive_autoscaling_config_from_ray_cr(as_raycluster(service))


def test_ray_autoscaler_accepts_the_rendered_cluster(cluster):
    service, config = cluster
    groups = {g["groupName"]: g for g in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
    types = config["available_node_types"]
    assert set(types) == {"headgroup", *groups}
    assert types["headgroup"]["resources"].get("CPU", 0) == 0  # nothing scheduled on the head
    for name, group in groups.items():
        assert types[name]["max_workers"] == group["maxReplicas"]
        container = group["template"]["spec"]["containers"][0]["resources"]
        # Ray is told exactly the CPUs the pod requests (none on the embedded store's own pod,
        # so no other replica takes its place), and the GPUs it is given.
        cpus = 0 if name == "store" else int(container["requests"]["cpu"])
        assert types[name]["resources"]["CPU"] == cpus
        assert types[name]["resources"].get("GPU", 0) == int(
            container.get("limits", {}).get("nvidia.com/gpu", 0)
        )


def planned_resources(config: dict) -> dict[str, dict]:
    """Ray's autoscaler's node types: group -> resources (zero entries dropped, as a raylet
    drops them)."""
    return {
        name: {k: v for k, v in node_type["resources"].items() if v}
        for name, node_type in config["available_node_types"].items()
    }


def resources_per_group(values: str | None) -> str:
    """Both readings of each group, one line each (what the README's figures come from)."""
    service = rendered_rayservice(values)
    planned = planned_resources(_derive_autoscaling_config_from_ray_cr(as_raycluster(service)))
    started = raylet_resources(service["spec"]["rayClusterConfig"])
    return "\n".join(
        f"{group}: raylet {started[group]} | autoscaler {planned[group]}" for group in planned
    )


def test_raylets_advertise_what_the_autoscaler_provisions_for(cluster):
    """For every group, the resources its raylets advertise (KubeRay's `ray start` line) are
    the resources Ray's autoscaler believes the group's pods have. The chart before this test
    named its pinning resources dense_gpu / sparse_gpu: KubeRay made them --num-gpus, the
    autoscaler kept them as custom resources."""
    service, config = cluster
    started = raylet_resources(service["spec"]["rayClusterConfig"])
    assert started == planned_resources(config)


def worker_nodes(service: dict, config: dict) -> list[dict]:
    """Every worker pod at its group's maximum, with what its raylet advertises."""
    started = raylet_resources(service["spec"]["rayClusterConfig"])
    return [
        dict(started[name])
        for name, node_type in config["available_node_types"].items()
        if name != "headgroup"
        for _ in range(node_type["max_workers"])
    ]


def test_every_deployment_fits_a_group_and_all_fit_at_max_size(cluster):
    """Packed into what the raylets advertise (not the rendered `resources` field)."""
    service, config = cluster
    nodes = worker_nodes(service, config)
    demands = deployment_demands(service)
    for name, bundle, _ in demands:
        unfit, _ = get_bin_pack_residual(nodes[:], [bundle])
        assert not unfit, f"{name} ({bundle}) fits no worker group"
    every_replica = [bundle for _, bundle, replicas in demands for _ in range(replicas)]
    unfit, _ = get_bin_pack_residual(nodes, every_replica)
    assert not unfit, f"at max replicas these stay pending: {unfit}"


def test_gpu_deployments_land_only_on_their_group():
    """dense_slot / sparse_slot are advertised by one group's raylets each: a dense replica
    cannot take a SPLADE GPU and the other way round (checked with the same bin packer)."""
    service = rendered_rayservice("ci/gpu-production.yaml")
    started = raylet_resources(service["spec"]["rayClusterConfig"])
    demands = {name: bundle for name, bundle, _ in deployment_demands(service)}
    for deployment, group in [
        ("dense", "dense-gpu"),
        ("splade", "sparse-gpu"),
        ("reranker", "sparse-gpu"),
    ]:
        for other, resources in started.items():
            unfit, _ = get_bin_pack_residual([dict(resources)], [demands[deployment]])
            assert (not unfit) == (other == group), (deployment, other, resources)


@pytest.mark.parametrize("values", VALUES, ids=lambda v: v or "defaults")
def test_ray_start_params_survive_the_shell(values):
    """KubeRay writes `ray start --key=value ...` into `bash -c`: every rendered parameter must
    stay one argument of the line KubeRay builds after the shell splits it (and Ray's CLI must
    accept the line: raylet_resources parses it)."""
    spec = rendered_rayservice(values)["spec"]["rayClusterConfig"]
    groups = [(spec["headGroupSpec"], HEAD)] + [(g, WORKER) for g in spec["workerGroupSpecs"]]
    for group, node_type in groups:
        words = shlex.split(group_ray_start_command(spec, group, node_type))
        for key, value in (group.get("rayStartParams") or {}).items():
            expected = f"--{key}" if str(value).lower() == "true" else f"--{key}={value}"
            assert expected in words, (key, value, words)
    raylet_resources(spec)


def _token_mounted(pod_spec: dict, accounts: dict[str, dict]) -> bool:
    """Kubernetes: the pod's automountServiceAccountToken wins, else the account's, else true."""
    if "automountServiceAccountToken" in pod_spec:
        return bool(pod_spec["automountServiceAccountToken"])
    account = accounts.get(pod_spec.get("serviceAccountName", "default"), {})
    return bool(account.get("automountServiceAccountToken", True))


@pytest.mark.parametrize("values", VALUES)
def test_autoscaler_sidecar_can_reach_the_api_server(values):
    """KubeRay (>= 0.6) binds the autoscaler's Role to the head pod's service account and does
    not create that account when the pod names one: the chart must create it, and the
    autoscaler container must get its token (mounted into that sidecar only,
    tests/helm/test_ray_auth.py). Workers never get a token."""
    args = [str(HELM), "template", "rel", str(CHART), "--namespace", "search", *SET_IMAGE]
    if values:
        args += ["-f", str(CHART / values)]
    docs = rendering.documents(*args)
    accounts = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceAccount"}
    (service,) = [d for d in docs if d["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    if cluster.get("enableInTreeAutoscaling"):
        name = head.get("serviceAccountName")
        assert name in accounts, f"head names service account {name!r}; the chart has none"
        volumes = {v["name"]: v for v in head.get("volumes") or []}
        sidecar = [
            volumes[m["name"]]
            for m in (cluster.get("autoscalerOptions") or {}).get("volumeMounts") or []
            if m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
        ]
        projected = [s for v in sidecar for s in v.get("projected", {}).get("sources", [])]
        assert _token_mounted(head, accounts) or any("serviceAccountToken" in s for s in projected)
    for group in cluster.get("workerGroupSpecs", []):
        assert not _token_mounted(group["template"]["spec"], accounts), group["groupName"]


@pytest.mark.parametrize("values", VALUES)
def test_serve_switches_reach_every_ray_process(values):
    """`serve.env` (HAProxy, throughput mode) is read by Ray Serve when its processes start;
    on a cluster they start from the containers' environment, head and workers alike. What
    reaches them is the environment the application's own configuration resolves to, the
    transport defaults it fills in included (the chart renders the file, not the model)."""
    from deployments.settings import SERVE_TRANSPORT_ENV, service_config

    service = rendered_rayservice(values)
    rendered = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]["args"]
    serve_env = service_config(rendered["config"], "rendered").serve.env
    assert SERVE_TRANSPORT_ENV.items() <= serve_env.items()
    cluster = service["spec"]["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        for container in group["template"]["spec"]["containers"]:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            for key, value in serve_env.items():
                assert env.get(key) == str(value), (container["name"], key)


def starting_replicas(deployment: dict) -> int:
    """The replicas Serve starts a deployment with: ``initial_replicas``, else the
    autoscaling minimum, else ``num_replicas``."""
    autoscaling = deployment.get("autoscaling_config") or {}
    if autoscaling:
        return int(autoscaling.get("initial_replicas") or autoscaling.get("min_replicas", 1))
    return int(deployment.get("num_replicas", 1))


def test_replicas_fit_the_pods_that_will_exist(cluster):
    """What creates pods decides what the replicas are packed into. With Ray's autoscaler
    off, KubeRay keeps each group at its `replicas` pods for good: every replica Serve starts
    (and every one its own autoscaling may add) must fit those pods, or one stays pending, the
    cluster never turns RUNNING and KubeRay fails the RayService after its initializing
    timeout. With the autoscaler on, pods follow the demand up to `maxReplicas` (the test
    above). Main's ci/cpu-small.yaml started 4 CPUs of replicas on one 3-CPU pod."""
    service, _ = cluster
    spec = service["spec"]["rayClusterConfig"]
    if spec.get("enableInTreeAutoscaling"):
        pytest.skip("the autoscaler adds pods up to maxReplicas: packed at max above")
    started = raylet_resources(spec)
    pods = [
        dict(started[group["groupName"]])
        for group in spec["workerGroupSpecs"]
        for _ in range(int(group.get("replicas", 0)))
    ]
    serve_config = yaml.safe_load(service["spec"]["serveConfigV2"])
    deployments = [d for app in serve_config["applications"] for d in app["deployments"]]
    for count in (starting_replicas, max_replicas):
        bundles = [
            replica_bundle(d.get("ray_actor_options", {}))
            for d in deployments
            for _ in range(count(d))
        ]
        unfit, _ = get_bin_pack_residual(pods[:], bundles)
        assert not unfit, f"with the autoscaler off these stay pending: {unfit}"


def documented_table() -> tuple[dict[str, tuple[dict, dict, str]], str]:
    """docs/kubernetes.md's table for ci/gpu-production.yaml (group -> raylet, autoscaler,
    pods) and the sentence after it, with memory in GiB as the doc writes it."""
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    start = text.index("For `ci/gpu-production.yaml` (raylet = autoscaler, per pod")
    lines = text[start:].splitlines()
    rows = [
        line for line in lines[1:12] if line.startswith("| ") and not line.startswith("| group")
    ]

    def parsed(cell: str) -> dict:
        pairs = [item.strip().rsplit(" ", 1) for item in cell.split(",")]
        return {name: float(value) for name, value in pairs}

    table = {}
    for row in rows:
        group, raylet, planned, pods = [c.strip().strip("`") for c in row.strip("|").split("|")]
        table[group] = (parsed(raylet), parsed(planned), pods)
    after = " ".join(text[start:].split("\n\n")[2].split())
    return table, after


def in_doc_units(resources: dict) -> dict:
    return {k: (v / 2**30 if k == "memory" else v) for k, v in resources.items()}


def test_the_docs_table_is_the_render():
    """Every figure of docs/kubernetes.md's table for ci/gpu-production.yaml (what each raylet
    advertises, the autoscaler's node type, the pods per group) and of the sentence after it
    (what the deployments take at their maximum, of what the groups offer at theirs) is the
    render's, so a values change that moves them fails here until the doc says so."""
    service = rendered_rayservice("ci/gpu-production.yaml")
    config = _derive_autoscaling_config_from_ray_cr(as_raycluster(service))
    cluster = service["spec"]["rayClusterConfig"]
    started = raylet_resources(cluster)
    planned = planned_resources(config)
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    table, after = documented_table()
    assert set(table) == set(planned)
    for group, (raylet, autoscaler, pods) in table.items():
        assert raylet == in_doc_units(started[group]), group
        assert autoscaler == in_doc_units(planned[group]), group
        spec = groups.get(group)
        assert pods == ("1" if spec is None else f"{spec['minReplicas']}-{spec['maxReplicas']}")
    offered: dict[str, float] = {}
    for name, node_type in config["available_node_types"].items():
        for resource, amount in started[name].items():
            offered[resource] = offered.get(resource, 0) + amount * node_type["max_workers"]
    taken: dict[str, float] = {}
    for _, bundle, replicas in deployment_demands(service):
        for resource, amount in bundle.items():
            taken[resource] = taken.get(resource, 0) + amount * replicas
    expected = (
        f"{taken['CPU']:g} of {offered['CPU']:g} CPUs, {taken['GPU']:g} of {offered['GPU']:g} GPUs, "
        + ", ".join(
            f"{slot} {taken[slot]:g}/{offered[slot]:g}"
            for slot in ("dense_slot", "sparse_slot", "llm_slot")
        )
    )
    assert expected.replace(", llm_slot", " and llm_slot") in after, (expected, after)
