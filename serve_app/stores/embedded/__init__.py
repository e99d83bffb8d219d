"""The embedded store (qdrant-edge in process), one collaborator per concern: ``shard`` (the
directory's ownership, open / attach / close, the write lock), ``chunks`` (writes, deletes,
reads), ``queries``, ``registry`` (named collections), ``maintenance`` (describe), composed
in ``backend`` (each takes the shard's owner); ``layout`` names the files of the index directory."""

from serve_app.stores.embedded.backend import EdgeBackend, build_embedded, embedded_index
from serve_app.stores.embedded.ids import IdTexts
from serve_app.stores.embedded.layout import META_FILE, REGISTRY_FILE, RESTORE_ASIDE, SHARD_DIR

__all__ = [
    "META_FILE",
    "REGISTRY_FILE",
    "RESTORE_ASIDE",
    "SHARD_DIR",
    "EdgeBackend",
    "IdTexts",
    "build_embedded",
    "embedded_index",
]
