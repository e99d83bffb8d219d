"""The Qdrant backend: dense vectors, and in the ``qdrant`` topology SPLADE and BM25 sparse
vectors too, composed of one module per concern (connection and versions, chunks, queries,
the collection registry, maintenance). The same client runs against qdrant-client's local
mode (``local_path``), which speaks the same API with exact search and no snapshots."""

from __future__ import annotations

from serve_app.config import AppConfig
from serve_app.stores.index import StoreIndex
from serve_app.stores.qdrant.chunks import QdrantChunks
from serve_app.stores.qdrant.maintenance import QdrantMaintenance
from serve_app.stores.qdrant.queries import QdrantQueries
from serve_app.stores.qdrant.registry import QdrantRegistry


class QdrantBackend(QdrantChunks, QdrantQueries, QdrantRegistry, QdrantMaintenance):
    """Qdrant as the store for ``strategies``: ("dense",) or ("bm25", "splade", "dense")."""

    holds_chunks = True


def build_qdrant(config: AppConfig) -> StoreIndex:
    return StoreIndex(
        [
            QdrantBackend(
                config.stores.qdrant,
                config.data_path,
                strategies=tuple(config.enabled_strategies()),
                migrate=config.stores.migrate,
            )
        ]
    )
