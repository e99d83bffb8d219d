"""The Qdrant server backend (qdrant-client, async), one collaborator per concern: ``connection``
(client, lifecycle, the versioned collection behind the alias), ``chunks`` (writes, deletes,
reads), ``queries``, ``registry`` (named collections), ``maintenance`` (describe,
snapshots), composed in ``backend`` (each takes the connection)."""

from serve_app.stores.qdrant.backend import QdrantBackend, build_qdrant
from serve_app.stores.qdrant.connection import QdrantStoreError
from serve_app.stores.qdrant.filters import to_client_filter

__all__ = ["QdrantBackend", "QdrantStoreError", "build_qdrant", "to_client_filter"]
