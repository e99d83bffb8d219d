"""The typed settings: the ``serve:`` section parsed once into the Ray layer's model, every
rule between it and the library's sections in one validator, environment overrides by
pydantic-settings' nested delimiter (file < environment)."""

from pathlib import Path

import pytest

from deployments.settings import ServeConfig, ServiceConfig, load_service_config, service_config
from serve_app.api.auth import Authenticator
from serve_app.config import AuthConfig, config_from_dict, load_config
from serve_app.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "config" / "local.yaml"


def test_the_serve_section_is_typed_once_and_bound_as_an_object():
    config = load_service_config(LOCAL, environ={"SERVE_APP__SERVE__DENSE__NUM_CPUS": "3"})
    assert isinstance(config, ServiceConfig) and isinstance(config.serve, ServeConfig)
    assert config.serve.dense.num_cpus == 3.0
    # The library's view of the same file keeps the section opaque.
    assert isinstance(load_config(LOCAL, environ={}).serve, dict)


def test_the_bound_object_travels_to_a_replica_whole():
    """Ray pickles a deployment's init arguments: the replica gets the parsed object back,
    its defaults filled and its rules already checked."""
    import pickle

    config = load_service_config(ROOT / "config" / "gpu.yaml", environ={})
    travelled = pickle.loads(pickle.dumps(config))
    assert travelled == config and isinstance(travelled.serve, ServeConfig)
    assert travelled.serve.ingress.access_log is True and travelled.serve.store.access_log is False


def test_a_changed_bind_is_validated_again():
    config = load_service_config(LOCAL, environ={})
    assert service_config(config, port=8123).serve.port == 8123
    with pytest.raises(ConfigError, match="loopback"):
        service_config(config, host="0.0.0.0")  # local.yaml serves with api.auth.mode none


def test_one_retrieve_batch_knob():
    with pytest.raises(ConfigError, match=r"serve\.batching\.retrieve_batch"):
        service_config(config_from_dict({"serve": {"batching": {"retrieve_batch": 8}}}))
    assert config_from_dict({"search": {"retrieve_batch": 8}}).search.retrieve_batch == 8


def test_retired_serve_batch_fields_are_refused_with_their_path():
    with pytest.raises(ConfigError, match=r"serve\.dense\.max_batch_size"):
        service_config(config_from_dict({"serve": {"dense": {"max_batch_size": 64}}}))


def test_env_overrides_take_yaml_lists_nulls_and_nested_serve_fields(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "stores:\n  opensearch:\n    hosts: [http://file:9200]\n"
        "dense:\n  batch_size: 3\n  append_token: x\n"
    )
    config = load_service_config(
        path,
        environ={
            "SERVE_APP__STORES__OPENSEARCH__HOSTS": "[http://env:9200, http://env2:9200]",
            "SERVE_APP__DENSE__APPEND_TOKEN": "null",
            "SERVE_APP__SERVE__INGRESS__NUM_REPLICAS": "2",
            "SERVE_APP__SERVE__ENV__RAY_SERVE_ENABLE_HA_PROXY": "0",
        },
    )
    assert config.stores.opensearch.hosts == ["http://env:9200", "http://env2:9200"]
    assert config.dense.batch_size == 3  # the file's, where the environment says nothing
    assert config.dense.append_token is None
    assert config.serve.ingress.num_replicas == 2
    assert config.serve.env["RAY_SERVE_ENABLE_HA_PROXY"] == "0"


def test_an_override_of_no_section_is_refused():
    with pytest.raises(ConfigError, match="SERVE_APP__DENCE__BATCH_SIZE"):
        load_config(LOCAL, environ={"SERVE_APP__DENCE__BATCH_SIZE": "3"})
    with pytest.raises(ConfigError, match=r"dense\.batch_sise"):
        load_config(LOCAL, environ={"SERVE_APP__DENSE__BATCH_SISE": "3"})


def test_library_cross_section_rules_hold_at_parse_time():
    with pytest.raises(ConfigError, match=r"chunker\.max_tokens"):
        config_from_dict({"chunker": {"max_tokens": 512}, "dense": {"max_length": 256}})
    with pytest.raises(ConfigError, match=r"dense\.backend"):
        config_from_dict({"dense": {"backend": "onnx"}})


def test_the_exposure_rule_is_the_same_at_every_door():
    """Audience and issuer off loopback: refused by the Ray layer's validator and by the
    library's API alike (one rule)."""
    jwt = {"enabled": True, "secret": "s" * 40}
    with pytest.raises(ConfigError, match="audience and issuer"):
        service_config(config_from_dict({"api": {"auth": {"jwt": jwt}}, "serve": {"host": "::"}}))
    with pytest.raises(ConfigError, match="audience and issuer"):
        Authenticator(AuthConfig(jwt=jwt), host="0.0.0.0")
    Authenticator(AuthConfig(jwt=jwt), host="127.0.0.1")
