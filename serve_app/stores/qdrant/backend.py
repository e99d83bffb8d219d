"""The Qdrant backend: dense vectors, and in the ``qdrant`` topology SPLADE and BM25 sparse
vectors too, composed of collaborators that each take the connection (``connection``: the
client and the versioned collection; chunks, queries, the collection registry, maintenance).
The same client runs against qdrant-client's local mode (``local_path``), which speaks the
same API with exact search and no snapshots."""

from __future__ import annotations

from serve_app.config import AppConfig
from serve_app.stores.composed import ComposedBackend
from serve_app.stores.index import StoreIndex
from serve_app.stores.qdrant.chunks import QdrantChunks
from serve_app.stores.qdrant.connection import QdrantConnection
from serve_app.stores.qdrant.maintenance import QdrantMaintenance
from serve_app.stores.qdrant.queries import QdrantQueries
from serve_app.stores.qdrant.registry import QdrantRegistry


class QdrantBackend(ComposedBackend[QdrantConnection]):
    """Qdrant as the store for ``strategies``: ("dense",) or ("bm25", "splade", "dense")."""

    def __init__(self, conn: QdrantConnection) -> None:
        super().__init__(
            conn,
            QdrantChunks(conn),
            QdrantQueries(conn),
            QdrantRegistry(conn),
            QdrantMaintenance(conn),
        )


def build_qdrant(config: AppConfig) -> StoreIndex:
    return StoreIndex(
        [
            QdrantBackend(
                QdrantConnection(
                    config.stores.qdrant,
                    config.data_path,
                    strategies=tuple(config.enabled_strategies()),
                    migrate=config.stores.migrate,
                )
            )
        ]
    )
