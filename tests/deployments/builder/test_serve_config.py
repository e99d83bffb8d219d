"""The checked-in Serve configs are exactly what the graph builder produces for their configs."""

from pathlib import Path

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from deployments.builder.graph import build_app, resolve_config
from deployments.builder.serve_config import render_yaml
from deployments.replicas.options import deployment_options
from deployments.settings import DeploymentSettings, ServeConfig, load_service_config

ROOT = Path(__file__).resolve().parents[3]
SERVE_CONFIGS = ROOT / "deployments" / "serve_configs"


@pytest.mark.parametrize("name", ["local", "gpu"])
def test_checked_in_serve_config_is_in_sync(name):
    expected = render_yaml(load_service_config(ROOT / "config" / f"{name}.yaml", environ={}))
    actual = (SERVE_CONFIGS / f"{name}.yaml").read_text()
    assert actual == expected, (
        f"deployments/serve_configs/{name}.yaml is stale: run python -m "
        f"deployments.builder.serve_config --config config/{name}.yaml "
        f"-o deployments/serve_configs/{name}.yaml"
    )


@pytest.mark.parametrize("name", ["local", "gpu"])
def test_serve_config_is_valid_and_round_trips_through_the_builder(name):
    document = yaml.safe_load((SERVE_CONFIGS / f"{name}.yaml").read_text())
    ServeDeploySchema.model_validate(document)
    (application,) = document["applications"]
    assert application["import_path"] == "deployments.builder.graph:build_app"
    # The inline args rebuild the same configuration the file was generated from.
    assert resolve_config(application["args"]) == load_service_config(
        ROOT / "config" / f"{name}.yaml", environ={}
    )
    names = [d["name"] for d in application["deployments"]]
    assert {"chunker", "dense", "store", "ingress"} <= set(names)
    assert build_app(application["args"]) is not None


def test_gpu_deployments_ask_for_gpus_and_autoscale():
    document = yaml.safe_load((SERVE_CONFIGS / "gpu.yaml").read_text())
    deployments = {d["name"]: d for d in document["applications"][0]["deployments"]}
    assert deployments["dense"]["ray_actor_options"]["num_gpus"] == 1
    assert deployments["splade"]["ray_actor_options"]["num_gpus"] == 0.5
    assert deployments["reranker"]["ray_actor_options"]["num_gpus"] == 0.5
    assert deployments["dense"]["autoscaling_config"]["max_replicas"] == 4
    assert deployments["dense"]["ray_actor_options"]["resources"] == {"dense_slot": 1}
    assert all("accelerator_type" not in d["ray_actor_options"] for d in deployments.values())
    dense = load_service_config(ROOT / "config" / "gpu.yaml", environ={}).dense
    assert (dense.backend, dense.device, dense.dtype) == ("vllm", "cuda", "bfloat16")
    assert dense.model.endswith("Qwen3-Embedding-8B") and dense.pooling == "last_token"


def test_options_from_settings():
    options = deployment_options(DeploymentSettings(num_replicas=3, num_cpus=0.25, num_gpus=0.5))
    assert options["num_replicas"] == 3
    assert options["ray_actor_options"] == {"num_cpus": 0.25, "num_gpus": 0.5}
    # Unset drain settings stay Serve's own defaults: the key is not written at all.
    assert "graceful_shutdown_wait_loop_s" not in options
    assert "graceful_shutdown_timeout_s" not in options


def test_drain_settings_reach_serves_deployment_config():
    """Validated by Serve's own config types: the local file's drain settings are what each
    deployment's ``DeploymentConfig`` holds; the GPU file keeps Serve's defaults except the
    ingress's bound, which lets an upload finish (tests/helm/test_drain.py)."""
    from ray.serve._private.config import DeploymentConfig

    defaults = DeploymentConfig()
    ingress_s = load_service_config(ROOT / "config" / "gpu.yaml", environ={}).serve.ingress
    expected = {
        "local": lambda name: (0.2, 2.0),
        "gpu": lambda name: (
            defaults.graceful_shutdown_wait_loop_s,
            ingress_s.graceful_shutdown_timeout_s
            if name == "ingress"
            else defaults.graceful_shutdown_timeout_s,
        ),
    }
    assert ingress_s.graceful_shutdown_timeout_s != defaults.graceful_shutdown_timeout_s
    for file, drain in expected.items():
        document = yaml.safe_load((SERVE_CONFIGS / f"{file}.yaml").read_text())
        ServeDeploySchema.model_validate(document)
        for deployment in document["applications"][0]["deployments"]:
            fields = {k: v for k, v in deployment.items() if k in DeploymentConfig.model_fields}
            config = DeploymentConfig(**fields)
            loop, timeout = drain(deployment["name"])
            assert config.graceful_shutdown_wait_loop_s == loop, (file, deployment["name"])
            assert config.graceful_shutdown_timeout_s == timeout, (file, deployment["name"])


def test_access_log_on_the_ingress_only_unless_configured():
    """Serve logs one line per call; internal calls (several per search) stay quiet by
    default, the client-facing ingress keeps its line, and a file can turn either way."""
    config = load_service_config(ROOT / "config" / "local.yaml", environ={})
    document = yaml.safe_load(render_yaml(config))
    ServeDeploySchema.model_validate(document)
    (application,) = document["applications"]
    logged = {
        d["name"]: d["logging_config"]["enable_access_log"] for d in application["deployments"]
    }
    assert logged.pop("ingress") is True and not any(logged.values())
    serve = config.serve.model_dump()
    serve["store"]["access_log"] = True
    serve["ingress"]["access_log"] = False
    turned = ServeConfig.model_validate(serve)
    store, ingress = deployment_options(turned.store), deployment_options(turned.ingress)
    assert store["logging_config"] == {"enable_access_log": True, "encoding": "JSON"}
    assert ingress["logging_config"] == {"enable_access_log": False, "encoding": "JSON"}
