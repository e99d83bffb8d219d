"""The OpenSearch backend (opensearch-py, async), one collaborator per concern: ``connection``
(client, lifecycle, the versioned index behind the alias), ``chunks`` (writes, deletes,
reads), ``queries``, ``registry`` (named collections), ``maintenance`` (describe,
snapshots), composed in ``backend`` (each takes the connection); ``bodies`` builds every request body."""

from serve_app.stores.opensearch.backend import OpenSearchBackend
from serve_app.stores.opensearch.chunks import source_to_chunk
from serve_app.stores.opensearch.connection import OpenSearchStoreError, make_client

__all__ = ["OpenSearchBackend", "OpenSearchStoreError", "make_client", "source_to_chunk"]
