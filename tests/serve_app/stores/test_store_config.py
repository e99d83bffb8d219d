"""Store configuration: endpoints required per topology, credentials from the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.settings import service_config
from serve_app.config import OpenSearchConfig, QdrantConfig, config_from_dict
from serve_app.errors import ConfigError
from serve_app.stores.opensearch import make_client
from serve_app.stores.qdrant import QdrantBackend
from serve_app.stores.qdrant.connection import QdrantConnection


@pytest.mark.parametrize(
    ("stores", "message"),
    [
        ({"topology": "qdrant"}, r"stores: .*needs stores\.qdrant\.url"),
        (
            {"topology": "opensearch+qdrant", "qdrant": {"url": "http://q:6333"}},
            r"needs stores\.opensearch\.hosts",
        ),
        (
            {"topology": "qdrant", "qdrant": {"url": "http://q:6333", "local_path": "x"}},
            "either qdrant.url or qdrant.local_path",
        ),
        ({"opensearch": {"field_boosts": {"abstract": 1.0}}}, "unknown field"),
        ({"opensearch": {"field_boosts": {"body": 0.0}}}, "at least one field"),
    ],
)
def test_invalid_store_configs_name_the_field(stores, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict({"stores": stores}, "test")


def test_opensearch_credentials_come_from_the_named_variables(monkeypatch):
    config = OpenSearchConfig(
        hosts=["https://os:9200"], username_env="OS_USER", password_env="OS_PW"
    )
    monkeypatch.delenv("OS_USER", raising=False)
    with pytest.raises(ConfigError, match="OS_USER, which is not set"):
        make_client(config)
    monkeypatch.setenv("OS_USER", "reader")
    monkeypatch.setenv("OS_PW", "s3cret")
    client = make_client(config)
    assert client.transport.hosts == [{"host": "os", "port": 9200, "use_ssl": True}]
    assert client.transport.kwargs["http_auth"] == ("reader", "s3cret")


def test_qdrant_api_key_comes_from_the_named_variable(monkeypatch):
    config = QdrantConfig(url="https://q:6333", api_key_env="QDRANT_KEY")
    monkeypatch.delenv("QDRANT_KEY", raising=False)
    with pytest.raises(ConfigError, match="QDRANT_KEY"):
        _ = QdrantBackend(QdrantConnection(config, Path("."))).connection.client
    monkeypatch.setenv("QDRANT_KEY", "k")
    assert QdrantBackend(QdrantConnection(config, Path("."))).connection.client is not None


def test_only_the_embedded_store_is_pinned_to_one_replica():
    with pytest.raises(ConfigError, match="one owning replica"):
        service_config(config_from_dict({"serve": {"store": {"num_replicas": 2}}}, "test"))
    scaled = config_from_dict(
        {
            "stores": {"topology": "qdrant", "qdrant": {"url": "http://q:6333"}},
            "serve": {"store": {"num_replicas": 3}},
        },
        "test",
    )
    assert service_config(scaled).serve.store.num_replicas == 3
