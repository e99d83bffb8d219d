"""Store factories shared by the store tests (the hand-made chunks and vectors are the
contract suite's: serve_app/testing/store_contract.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

from opensearchpy import AIOHttpConnection
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError

from serve_app.config import EmbeddedStoreConfig, OpenSearchConfig, QdrantConfig
from serve_app.stores.embedded import embedded_index
from serve_app.stores.index import StoreIndex
from serve_app.stores.opensearch import OpenSearchBackend
from serve_app.stores.qdrant import QdrantBackend
from serve_app.stores.qdrant.connection import QdrantConnection
from serve_app.testing.store_contract import MODELS, encoded, query, write  # noqa: F401

TOPOLOGY_NAMES = ["embedded", "qdrant", "opensearch+qdrant"]


def opensearch_config(url: str, **overrides) -> OpenSearchConfig:
    values = {
        "hosts": [url],
        "index": f"chunks-{uuid.uuid4().hex[:8]}",
        "number_of_replicas": 0,
        "max_retries": 1,
        "retry_backoff_s": 0.01,
        **overrides,
    }
    return OpenSearchConfig(**values)


def make_store(
    topology: str,
    tmp_path: Path,
    opensearch_url: str | None = None,
    qdrant_local: str = ":memory:",
    collection: str = "chunks",
    os_config: OpenSearchConfig | None = None,
    migrate: bool = False,
    qdrant_url: str | None = None,
):
    """A store of each topology on real engines: qdrant-edge, qdrant-client local mode (or,
    with ``qdrant_url``, its REST client against that server), and the OpenSearch REST
    server given by ``opensearch_url``."""
    qdrant = (
        QdrantConfig(url=qdrant_url, collection=collection, exact=True)
        if qdrant_url
        else QdrantConfig(local_path=qdrant_local, collection=collection, exact=True)
    )
    if topology == "embedded":
        return embedded_index(tmp_path / "embedded", EmbeddedStoreConfig(exact=True))
    if topology == "qdrant":
        return StoreIndex([QdrantBackend(QdrantConnection(qdrant, tmp_path, migrate=migrate))])
    if topology == "opensearch+qdrant":
        assert opensearch_url is not None
        return StoreIndex(
            [
                OpenSearchBackend(os_config or opensearch_config(opensearch_url), migrate=migrate),
                QdrantBackend(QdrantConnection(qdrant, tmp_path, strategies=("dense",), migrate=migrate)),
            ]
        )
    raise ValueError(topology)


class FlakyConnection(AIOHttpConnection):
    """An injected transport error at the client boundary: fails ``_bulk`` requests after
    ``bulk_budget`` of them (then everything, if ``down_after_bulk_failure``), or every request
    while ``down``."""

    bulk_budget: int | None = None
    down = False

    async def perform_request(self, method, url, params=None, body=None, *args, **kwargs):
        cls = type(self)
        if cls.down:
            raise OpenSearchConnectionError("N/A", "injected: OpenSearch down", None)
        if "_bulk" in url and cls.bulk_budget is not None:
            if cls.bulk_budget == 0:
                cls.down = cls.down_after_bulk_failure
                raise OpenSearchConnectionError("N/A", "injected: connection reset", None)
            cls.bulk_budget -= 1
        return await super().perform_request(method, url, params, body, *args, **kwargs)

    down_after_bulk_failure = False
