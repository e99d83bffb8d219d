import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deployments.settings import load_service_config
from serve_app.config import (
    ApiConfig,
    AppConfig,
    config_from_dict,
    env_overrides,
    load_config,
    resolve_model_path,
)
from serve_app.errors import ConfigError

LOCAL = Path(__file__).resolve().parents[2] / "config" / "local.yaml"


def test_local_yaml_loads_and_passes_registry_checks():
    config = load_config(LOCAL, environ={})  # the registry names are checked as it parses
    assert config.stores.topology == "embedded"
    assert config.reranker.enabled is False


def test_env_overrides_nested_and_typed():
    config = load_config(
        LOCAL,
        environ={"SERVE_APP__DENSE__BATCH_SIZE": "64", "SERVE_APP__SEARCH__FUSION__METHOD": "dbsf"},
    )
    assert config.dense.batch_size == 64
    assert config.search.fusion.method == "dbsf"


def _serve_switches_under(env: dict[str, str]) -> dict[str, object]:
    """Ray Serve's own reading of ``env``: its constants, imported in a fresh process."""
    probe = (
        "import json; from ray.serve._private import constants as c; print(json.dumps({"
        "'throughput': c.RAY_SERVE_THROUGHPUT_OPTIMIZED, 'haproxy': c.RAY_SERVE_ENABLE_HA_PROXY,"
        "'grpc': c.RAY_SERVE_USE_GRPC_BY_DEFAULT,"
        "'grpc_max': c.RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH}))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")}
    out = subprocess.run(
        [sys.executable, "-c", probe], env={**clean, **env}, capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_config_that_names_no_serve_switches_runs_the_measured_transport(tmp_path):
    """A minimal file (the GPU harness's has no ``serve.env``) still gets HAProxy and gRPC
    between replicas with gRPC's full message size, as Ray Serve itself reads the switches; a
    key the file sets wins, so Serve's defaults stay one line away."""
    path = tmp_path / "minimal.yaml"
    path.write_text("serve:\n  port: 8001\n")
    switches = _serve_switches_under(load_service_config(path, environ={}).serve.env)
    assert switches == {"throughput": True, "haproxy": True, "grpc": True, "grpc_max": 2**31 - 1}

    path.write_text(
        "serve:\n  env:\n    RAY_SERVE_THROUGHPUT_OPTIMIZED: '0'\n"
        "    RAY_SERVE_ENABLE_HA_PROXY: '0'\n"
    )
    switches = _serve_switches_under(load_service_config(path, environ={}).serve.env)
    assert not switches["throughput"] and not switches["haproxy"] and not switches["grpc"]


def test_env_overrides_are_coerced_by_their_field():
    environ = {"SERVE_APP__SEARCH__RERANK": "false", "OTHER": "x"}
    assert env_overrides(environ) == {"search": {"rerank": "false"}}
    assert load_config(LOCAL, environ=environ).search.rerank is False


@pytest.mark.parametrize(
    "yaml_text,field",
    [
        ("dense:\n  batch_sise: 3\n", "dense.batch_sise"),
        ("dense:\n  batch_size: 0\n", "dense.batch_size"),
        ("chunker:\n  max_tokens: 64\n  overlap_tokens: 64\n", "chunker"),
        ("search:\n  fusion:\n    method: borda\n", "search.fusion.method"),
        ("splade:\n  enabled: false\n", "search.strategies"),
    ],
)
def test_invalid_config_names_the_field(tmp_path, yaml_text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as error:
        load_config(path, environ={})
    assert field.split(".")[0] in error.value.message
    assert field in error.value.message or "strategies" in error.value.message


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("chunker", {"name": "paragraphs"}, "chunker.name"),
        ("dense", {"backend": "onnx"}, "dense.backend"),
        ("stores", {"topology": "pinecone"}, "stores.topology"),
        ("llm", {"enabled": True, "backend": "llamacpp", "model": "x.gguf"}, "llm.backend"),
    ],
)
def test_unknown_component_names_fail_at_start(field, value, message):
    with pytest.raises(ConfigError, match=message):
        AppConfig.model_validate({field: value})


def test_chunk_size_over_model_limit_rejected():
    with pytest.raises(ConfigError, match=r"chunker\.max_tokens"):
        config_from_dict({"chunker": {"max_tokens": 512}, "dense": {"max_length": 256}})


def test_missing_file_and_package():
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent.yaml", environ={})
    with pytest.raises(ConfigError, match="not installed"):
        resolve_model_path("package:no_such_package_xyz/model")


def test_round_trip_through_dict():
    config = load_config(LOCAL, environ={})
    assert AppConfig.model_validate(config.model_dump()) == config


def test_the_library_knows_nothing_of_ray_serve_settings():
    """The ``serve:`` section is the Ray Serve layer's (deployments/settings.py): serve_app
    carries it through unread and names none of its settings."""
    root = Path(__file__).resolve().parents[2] / "serve_app"
    owned = ("DeploymentSettings", "num_replicas", "RAY_SERVE_", "autoscaling", "from deployments")
    found = [
        f"{path.relative_to(root)}: {word}"
        for path in root.rglob("*.py")
        for word in owned
        if word in path.read_text()
    ]
    assert not found, found
    config = config_from_dict({"serve": {"dense": {"num_replicas": 7, "no_such_field": 1}}})
    assert config.serve["dense"]["num_replicas"] == 7  # carried, not read


def test_trusted_proxies_are_networks():
    api = ApiConfig(trusted_proxies=["10.1.2.3/8", " fd00::/8", "192.0.2.1"])
    assert api.trusted_proxies == ["10.0.0.0/8", "fd00::/8", "192.0.2.1/32"]
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 network"):
        ApiConfig(trusted_proxies=["ingress-nginx"])
