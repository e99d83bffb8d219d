"""The store algorithm, once, over the backends of a topology: ``StoreIndex``, one module per
protocol line: ``writes`` and ``reads`` (``ServingIndex``), ``collections``
(``CollectionRegistry``), ``maintenance`` (``IndexMaintenance`` and snapshots), over
``topology`` (the backends and their lifecycle)."""

from serve_app.stores.index.maintenance import StoreMaintenance
from serve_app.stores.index.topology import RECOVERY_TIMEOUT_S
from serve_app.stores.index.writes import StoreWrites


class StoreIndex(StoreMaintenance, StoreWrites):
    """A ``ChunkIndex`` over ``backends``; the first one that holds chunks serves fetches."""


__all__ = ["RECOVERY_TIMEOUT_S", "StoreIndex"]
