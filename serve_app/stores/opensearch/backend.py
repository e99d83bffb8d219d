"""The OpenSearch backend: BM25 and SPLADE retrieval plus the chunks themselves, composed
of one module per concern (connection and versions, chunks, queries, the collection
registry, maintenance)."""

from __future__ import annotations

from serve_app.schemas import Strategy
from serve_app.stores.opensearch.chunks import OpenSearchChunks
from serve_app.stores.opensearch.maintenance import OpenSearchMaintenance
from serve_app.stores.opensearch.queries import OpenSearchQueries
from serve_app.stores.opensearch.registry import OpenSearchRegistry


class OpenSearchBackend(
    OpenSearchMaintenance, OpenSearchChunks, OpenSearchQueries, OpenSearchRegistry
):
    """BM25 and SPLADE retrieval plus the chunks themselves (fetch, document info)."""

    strategies: tuple[Strategy, ...] = ("bm25", "splade")
    holds_chunks = True
