"""The rendered RayService checked with the code that runs it: Ray's own KubeRay autoscaler
config derivation and its bin-packing scheduler (both ship in the ray wheel), and the shell
line KubeRay builds from rayStartParams."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.kuberay.autoscaling_config import (
    _derive_autoscaling_config_from_ray_cr,
)
from ray.autoscaler._private.resource_demand_scheduler import get_bin_pack_residual

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "serve-app"
HELM = ROOT / ".cache" / "bin" / "helm"
VALUES = [None, "ci/cpu-small.yaml", "ci/gpu-production.yaml", "ci/external-stores.yaml"]


def rendered_rayservice(values: str | None) -> dict:
    args = [str(HELM), "template", "rel", str(CHART), "--namespace", "search"]
    if values:
        args += ["-f", str(CHART / values)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (service,) = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "RayService"]
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
            options = deployment.get("ray_actor_options", {})
            bundle = {"CPU": options.get("num_cpus", 1)}
            if options.get("num_gpus"):
                bundle["GPU"] = options["num_gpus"]
            bundle.update(options.get("resources", {}))
            if options.get("accelerator_type"):
                bundle[f"accelerator_type:{options['accelerator_type']}"] = 0.001
            autoscaling = deployment.get("autoscaling_config") or {}
            replicas = autoscaling.get("max_replicas", deployment.get("num_replicas", 1))
            demands.append((deployment["name"], bundle, int(replicas)))
    return demands


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
        # Ray is told exactly the CPUs the pod requests, and the GPUs it is given.
        assert types[name]["resources"]["CPU"] == int(container["requests"]["cpu"])
        assert types[name]["resources"].get("GPU", 0) == int(
            container.get("limits", {}).get("nvidia.com/gpu", 0)
        )


def test_every_deployment_fits_a_group_and_all_fit_at_max_size(cluster):
    service, config = cluster
    nodes = [
        dict(node_type["resources"])
        for name, node_type in config["available_node_types"].items()
        if name != "headgroup"
        for _ in range(node_type["max_workers"])
    ]
    demands = deployment_demands(service)
    for name, bundle, _ in demands:
        unfit, _ = get_bin_pack_residual(nodes[:], [bundle])
        assert not unfit, f"{name} ({bundle}) fits no worker group"
    every_replica = [bundle for _, bundle, replicas in demands for _ in range(replicas)]
    unfit, _ = get_bin_pack_residual(nodes, every_replica)
    assert not unfit, f"at max replicas these stay pending: {unfit}"


def test_gpu_deployments_land_only_on_their_group():
    """dense_gpu / sparse_gpu are offered by one group each: a dense replica cannot take a
    SPLADE GPU and the other way round (checked with the same bin packer)."""
    service = rendered_rayservice("ci/gpu-production.yaml")
    config = _derive_autoscaling_config_from_ray_cr(as_raycluster(service))
    types = config["available_node_types"]
    demands = {name: bundle for name, bundle, _ in deployment_demands(service)}
    for deployment, group in [("dense", "dense-gpu"), ("splade", "sparse-gpu")]:
        for other, node_type in types.items():
            unfit, _ = get_bin_pack_residual([dict(node_type["resources"])], [demands[deployment]])
            assert (not unfit) == (other == group), (deployment, other)


@pytest.mark.parametrize("values", VALUES, ids=lambda v: v or "defaults")
def test_ray_start_params_survive_the_shell(values):
    """KubeRay writes `ray start --key=value ...` into `bash -c`: every parameter must stay one
    argument after the shell splits the line."""
    spec = rendered_rayservice(values)["spec"]["rayClusterConfig"]
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        params = group.get("rayStartParams") or {}
        line = "ray start " + " ".join(f"--{key}={value}" for key, value in params.items())
        assert shlex.split(line)[2:] == [f"--{k}={v}" for k, v in params.items()]


def _token_mounted(pod_spec: dict, accounts: dict[str, dict]) -> bool:
    """Kubernetes: the pod's automountServiceAccountToken wins, else the account's, else true."""
    if "automountServiceAccountToken" in pod_spec:
        return bool(pod_spec["automountServiceAccountToken"])
    account = accounts.get(pod_spec.get("serviceAccountName", "default"), {})
    return bool(account.get("automountServiceAccountToken", True))


@pytest.mark.parametrize("values", VALUES)
def test_autoscaler_sidecar_can_reach_the_api_server(values):
    """KubeRay (>= 0.6) binds the autoscaler's Role to the head pod's service account and does
    not create that account when the pod names one: the chart must create it, and the head
    must mount its token. Workers never get a token."""
    args = [str(HELM), "template", "rel", str(CHART), "--namespace", "search"]
    if values:
        args += ["-f", str(CHART / values)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    accounts = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceAccount"}
    (service,) = [d for d in docs if d["kind"] == "RayService"]
    cluster = service["spec"]["rayClusterConfig"]
    head = cluster["headGroupSpec"]["template"]["spec"]
    if cluster.get("enableInTreeAutoscaling"):
        name = head.get("serviceAccountName")
        assert name in accounts, f"head names service account {name!r}; the chart has none"
        assert _token_mounted(head, accounts)
    for group in cluster.get("workerGroupSpecs", []):
        assert not _token_mounted(group["template"]["spec"], accounts), group["groupName"]


@pytest.mark.parametrize("values", VALUES)
def test_serve_switches_reach_every_ray_process(values):
    """`serve.env` (HAProxy, throughput mode) is read by Ray Serve when its processes start;
    on a cluster they start from the containers' environment, head and workers alike. What
    reaches them is the environment the application's own configuration resolves to, the
    transport defaults it fills in included (the chart renders the file, not the model)."""
    from deployments.settings import SERVE_TRANSPORT_ENV, serve_settings
    from serve_app.config import config_from_dict

    service = rendered_rayservice(values)
    rendered = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]["args"]
    serve_env = serve_settings(config_from_dict(rendered["config"], "rendered")).env
    assert SERVE_TRANSPORT_ENV.items() <= serve_env.items()
    cluster = service["spec"]["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        for container in group["template"]["spec"]["containers"]:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            for key, value in serve_env.items():
                assert env.get(key) == str(value), (container["name"], key)
