"""The LLM deployment's settings: its options come from serve.llm; a replica must be able to
hold every request it admits (else Serve queues the excess at the caller, past the 429); it is
bound only when llm.enabled."""

from pathlib import Path

import pytest

from deployments.replicas.llm import LlmDeployment
from deployments.settings import load_service_config, service_config
from serve_app.config import config_from_dict, load_config
from serve_app.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def with_llm(serve_llm: dict, **llm) -> object:
    data = load_config(ROOT / "config" / "local.yaml", environ={}).model_dump()
    data["llm"] = {**data["llm"], **llm}
    data["serve"] = {**data["serve"], "llm": serve_llm}
    return config_from_dict(data, "test")


def test_max_ongoing_requests_must_exceed_what_a_replica_admits():
    with pytest.raises(ConfigError, match=r"serve.llm.max_ongoing_requests \(6\) must exceed"):
        service_config(with_llm({"max_ongoing_requests": 6}, parallel=2, max_queued=4))
    service_config(with_llm({"max_ongoing_requests": 7}, parallel=2, max_queued=4))
    # Not checked when the LLM is off: no deployment is bound for it.
    service_config(with_llm({"max_ongoing_requests": 1}, enabled=False))


def test_the_gpu_configuration_places_the_llm_on_its_own_gpu_group():
    config = load_service_config(ROOT / "config" / "gpu.yaml", environ={})
    options = LlmDeployment.func_or_class.get_deployment_options(config)
    assert options["ray_actor_options"]["num_gpus"] == 1
    assert options["ray_actor_options"]["resources"] == {"llm_slot": 1}
    assert options["autoscaling_config"]["max_replicas"] == 4
    assert options["max_ongoing_requests"] > config.llm.parallel + config.llm.max_queued
    assert config.llm.backend == "vllm" and config.llm.device == "cuda"


def test_the_app_binds_the_llm_only_when_enabled():
    from deployments.builder.serve_config import render_serve_config

    def deployments(config) -> set[str]:
        (application,) = render_serve_config(config)["applications"]
        return {d["name"] for d in application["deployments"]}

    assert "llm" in deployments(with_llm({"max_ongoing_requests": 8}))
    assert "llm" not in deployments(with_llm({"max_ongoing_requests": 8}, enabled=False))


def test_an_enabled_llm_needs_a_model():
    with pytest.raises(ConfigError, match=r"llm\.model is required"):
        with_llm({}, model="")
