"""The OpenSearch backend: BM25 and SPLADE retrieval plus the chunks themselves, composed of
collaborators that each take the connection (``connection``: the client and the versioned
index; chunks, queries, the collection registry, maintenance)."""

from __future__ import annotations

from opensearchpy import AsyncOpenSearch

from serve_app.config import OpenSearchConfig
from serve_app.stores.composed import ComposedBackend
from serve_app.stores.opensearch.chunks import OpenSearchChunks
from serve_app.stores.opensearch.connection import OpenSearchConnection
from serve_app.stores.opensearch.maintenance import OpenSearchMaintenance
from serve_app.stores.opensearch.queries import OpenSearchQueries
from serve_app.stores.opensearch.registry import OpenSearchRegistry


class OpenSearchBackend(ComposedBackend[OpenSearchConnection]):
    """BM25 and SPLADE retrieval plus the chunks themselves (fetch, document info)."""

    def __init__(
        self, config: OpenSearchConfig, migrate: bool = False, client: AsyncOpenSearch | None = None
    ) -> None:
        conn = OpenSearchConnection(config, migrate=migrate, client=client)
        chunks = OpenSearchChunks(conn)
        super().__init__(
            conn,
            chunks,
            OpenSearchQueries(conn),
            OpenSearchRegistry(conn),
            OpenSearchMaintenance(conn, chunks),
        )
