"""The store names other packages import, re-exported: the scope (``ScopeKey``, a domain value
of ``serve_app/schemas.py``), the value types (``stores/values.py``), the protocols
(``stores/protocols.py``) and the topologies (``stores/topologies.py``). Modules under
``serve_app/stores`` import each name from the module that defines it."""

from serve_app.schemas import ScopeKey
from serve_app.stores.protocols import (
    Backend,
    ChunkIndex,
    CollectionRegistry,
    IndexMaintenance,
    IndexReport,
    ServedIndex,
    ServingIndex,
    Snapshots,
)
from serve_app.stores.scope import in_scope
from serve_app.stores.topologies import TOPOLOGIES
from serve_app.stores.values import (
    PAYLOAD_INDEXES,
    DocumentWrite,
    EncodedChunk,
    Hit,
    IndexModels,
    QueryVectors,
    SearchQuery,
)

__all__ = [
    "PAYLOAD_INDEXES",
    "TOPOLOGIES",
    "Backend",
    "ChunkIndex",
    "CollectionRegistry",
    "DocumentWrite",
    "EncodedChunk",
    "Hit",
    "IndexMaintenance",
    "IndexModels",
    "IndexReport",
    "QueryVectors",
    "ScopeKey",
    "SearchQuery",
    "ServedIndex",
    "ServingIndex",
    "Snapshots",
    "in_scope",
]
