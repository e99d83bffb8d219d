from pathlib import Path

import pytest

from serve_app.config import AppConfig, env_overrides, load_config, resolve_model_path
from serve_app.errors import ConfigError
from serve_app.pipelines.components import check_config

LOCAL = Path(__file__).resolve().parents[2] / "config" / "local.yaml"


def test_local_yaml_loads_and_passes_registry_checks():
    config = load_config(LOCAL, environ={})
    check_config(config)
    assert config.stores.topology == "embedded"
    assert config.reranker.enabled is False


def test_env_overrides_nested_and_typed():
    config = load_config(
        LOCAL,
        environ={"SERVE_APP__DENSE__BATCH_SIZE": "64", "SERVE_APP__SEARCH__FUSION__METHOD": "dbsf"},
    )
    assert config.dense.batch_size == 64
    assert config.search.fusion.method == "dbsf"


def test_env_overrides_parse_yaml_scalars():
    assert env_overrides({"SERVE_APP__SPLADE__ENABLED": "false", "OTHER": "x"}) == {
        "splade": {"enabled": False}
    }


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
    ],
)
def test_unknown_component_names_fail_at_start(field, value, message):
    config = AppConfig.model_validate({field: value})
    with pytest.raises(ConfigError, match=message):
        check_config(config)


def test_chunk_size_over_model_limit_rejected():
    config = AppConfig.model_validate(
        {"chunker": {"max_tokens": 512}, "dense": {"max_length": 256}}
    )
    with pytest.raises(ConfigError, match=r"chunker\.max_tokens"):
        check_config(config)


def test_missing_file_and_package():
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent.yaml", environ={})
    with pytest.raises(ConfigError, match="not installed"):
        resolve_model_path("package:no_such_package_xyz/model")


def test_round_trip_through_dict():
    config = load_config(LOCAL, environ={})
    assert AppConfig.model_validate(config.model_dump()) == config


def test_retired_serve_batching_fields_still_load(caplog):
    from serve_app.config import DeploymentSettings

    with caplog.at_level("WARNING"):
        settings = DeploymentSettings.model_validate(
            {"num_replicas": 2, "max_batch_size": 64, "batch_wait_timeout_s": 0.002}
        )
    assert settings.num_replicas == 2
    assert "no longer used" in caplog.text
    with pytest.raises(ValueError, match="max_batch_sizes"):
        DeploymentSettings.model_validate({"max_batch_sizes": 1})  # typos still fail
