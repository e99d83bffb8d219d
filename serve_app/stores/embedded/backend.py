"""The embedded store: Qdrant's engine in process (qdrant-edge), one shard for all
strategies, composed of collaborators that each take the shard's owner (the shard and its lifecycle;
chunks, queries, the collection registry, maintenance).

Named vectors: ``dense`` (cosine, HNSW), ``splade`` (sparse dot product) and ``bm25``
(sparse, IDF modifier: the engine keeps document frequencies and applies IDF at query time).
Payload indexes on tenant_id, doc_id and section. One process owns a shard directory. A
batch of queries (``query``) or fetches (``present``/``chunks``) is one engine call."""

from __future__ import annotations

from pathlib import Path

from serve_app.config import AppConfig, EmbeddedStoreConfig
from serve_app.stores.composed import ComposedBackend
from serve_app.stores.embedded.chunks import EdgeChunks
from serve_app.stores.embedded.maintenance import EdgeMaintenance
from serve_app.stores.embedded.queries import EdgeQueries
from serve_app.stores.embedded.registry import EdgeRegistry
from serve_app.stores.embedded.shard import EdgeShardOwner
from serve_app.stores.index import StoreIndex


class EdgeBackend(ComposedBackend[EdgeShardOwner]):
    """qdrant-edge primitives for every strategy; its payloads are whole chunks."""

    def __init__(self, path: str | Path, config: EmbeddedStoreConfig) -> None:
        owner = EdgeShardOwner(path, config)
        super().__init__(
            owner,
            EdgeChunks(owner),
            EdgeQueries(owner),
            EdgeRegistry(owner),
            EdgeMaintenance(owner),
        )


def embedded_index(path: str | Path, config: EmbeddedStoreConfig) -> StoreIndex:
    """The embedded topology over the shard directory ``path``."""
    return StoreIndex([EdgeBackend(path, config)])


def build_embedded(config: AppConfig) -> StoreIndex:
    return embedded_index(config.data_path / config.stores.embedded.path, config.stores.embedded)
