"""The ``opensearch+qdrant`` topology: BM25 and SPLADE (and the chunks) in OpenSearch, dense
vectors in Qdrant; the consistency rules across the two are StoreIndex's
(stores/index/writes.py)."""

from __future__ import annotations

from serve_app.config import AppConfig
from serve_app.stores.index import StoreIndex
from serve_app.stores.opensearch import OpenSearchBackend
from serve_app.stores.qdrant import QdrantBackend
from serve_app.stores.qdrant.connection import QdrantConnection


def build_split(config: AppConfig) -> StoreIndex:
    stores = config.stores
    return StoreIndex(
        [
            OpenSearchBackend(stores.opensearch, migrate=stores.migrate),
            QdrantBackend(
                QdrantConnection(
                    stores.qdrant, config.data_path, strategies=("dense",), migrate=stores.migrate
                )
            ),
        ]
    )
