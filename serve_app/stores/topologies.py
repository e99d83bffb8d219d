"""The store topologies by name (``stores.topology``); each module is imported only when
the configuration names it."""

from __future__ import annotations

from serve_app.catalog import Catalog
from serve_app.stores.protocols import ChunkIndex

TOPOLOGIES: Catalog[ChunkIndex] = Catalog("store topology", "stores.topology")
_STORES_EXTRA = "install the stores extra: pip install 'serve-app[stores]'"
TOPOLOGIES.register_lazy("embedded", "serve_app.stores.embedded:build_embedded")
TOPOLOGIES.register_lazy("qdrant", "serve_app.stores.qdrant:build_qdrant", _STORES_EXTRA)
TOPOLOGIES.register_lazy("opensearch+qdrant", "serve_app.stores.split:build_split", _STORES_EXTRA)
