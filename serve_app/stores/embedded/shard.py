"""The embedded store's shard: ownership of its directory, open (with the model guard) /
attach / close, and the write lock every engine write runs under.

qdrant-edge has no background optimizer: what its writes leave unoptimized stays so (the
SciFact index ``serve-app eval`` writes is one appendable segment, where dense search scans
every vector) until ``EdgeShard.optimize()`` builds the HNSW graph. That call holds the GIL
for its whole run (docs/benchmarks.md, measured on that index: another thread of the
process held up 2.3-3.4 s), so it would stall every search of a serving replica; the store
runs it when it opens an existing index, before it serves."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path
from typing import Any

import qdrant_edge as edge

from serve_app.config import EmbeddedStoreConfig
from serve_app.errors import (
    ModelMismatchError,
    NotFoundError,
    ServiceUnavailableError,
    StoreUnavailableError,
)
from serve_app.schemas import Strategy
from serve_app.stores.binding import judge_binding
from serve_app.stores.embedded.ids import IdTexts
from serve_app.stores.embedded.layout import META_FILE, RESTORE_ASIDE, SHARD_DIR
from serve_app.stores.ownership import IndexOwnership
from serve_app.stores.values import PAYLOAD_INDEXES, IndexModels

log = logging.getLogger(__name__)


def _load_optimized(shard_path: Path) -> edge.EdgeShard:
    """Load a shard and build what its writes left unindexed (see the module's docstring)."""
    shard = edge.EdgeShard.load(str(shard_path))
    shard.optimize()
    return shard


class EdgeShardOwner:
    """One shard directory, owned by this process while open. Each collaborator of
    ``EdgeBackend`` takes it (``stores/composed.py``)."""

    name = "qdrant-edge"
    strategies: tuple[Strategy, ...] = ("bm25", "splade", "dense")

    def __init__(self, path: str | Path, config: EmbeddedStoreConfig) -> None:
        self.path = Path(path)
        self.config = config
        self._shard: edge.EdgeShard | None = None
        self._write_lock = threading.Lock()
        self._id_text = IdTexts()
        self._ownership = IndexOwnership(self.path)
        self._write_failure: str | None = None

    def _edge_config(self, models: IndexModels) -> edge.EdgeConfig:
        hnsw = edge.HnswIndexConfig(
            m=self.config.hnsw_m,
            ef_construct=self.config.hnsw_ef_construct,
            full_scan_threshold=self.config.full_scan_threshold_kb,
        )
        return edge.EdgeConfig(
            vectors={
                "dense": edge.EdgeVectorParams(
                    size=models.dense_dim, distance=edge.Distance.Cosine, hnsw_config=hnsw
                )
            },
            sparse_vectors={
                "splade": edge.EdgeSparseVectorParams(),
                "bm25": edge.EdgeSparseVectorParams(modifier=edge.Modifier.Idf),
            },
        )

    def _open_sync(self, models: IndexModels) -> None:
        self._ownership.acquire()  # before reading a file of the index: see stores.ownership
        try:
            self._open_owned(models)
        except BaseException:
            self._shard = None
            self._ownership.release()
            raise

    def _open_owned(self, models: IndexModels) -> None:
        meta_path = self.path / META_FILE
        if not meta_path.exists() and (self.path / RESTORE_ASIDE).exists():
            raise ServiceUnavailableError(
                f"a restore into {self.path} was interrupted: the previous index is in "
                f"{self.path / RESTORE_ASIDE}; move its entries back (or run the restore again "
                "after deleting it)"
            )
        if meta_path.exists():
            verdict = judge_binding(json.loads(meta_path.read_text()), models.as_dict())
            if verdict.records_revisions:  # recorded below, with the rest of the binding
                log.warning(verdict.unrecorded_warning(f"the index at {self.path}"))
            elif verdict.refused:
                raise ModelMismatchError(
                    f"the index at {self.path} was built with other models "
                    f"({verdict.describe()}); configure the models it "
                    "was built with, or re-index into a new stores.embedded.path (or delete "
                    "the old index to rebuild it)"
                )
        shard_path = self.path / SHARD_DIR
        try:
            if (shard_path / "segments").exists() or any(shard_path.glob("*")):
                self._shard = _load_optimized(shard_path)
            else:
                self._shard = edge.EdgeShard.create(str(shard_path), self._edge_config(models))
                for field in PAYLOAD_INDEXES:
                    self._shard.update(
                        edge.UpdateOperation.create_field_index(
                            field, edge.PayloadSchemaType.Keyword
                        )
                    )
        except (OSError, RuntimeError, ValueError) as error:
            raise ServiceUnavailableError(
                f"cannot open the embedded index at {shard_path}: {error}"
            ) from None
        meta_path.write_text(json.dumps(models.as_dict(), indent=2))

    async def open(self, models: IndexModels) -> None:
        await asyncio.to_thread(self._open_sync, models)

    def _attach_sync(self) -> None:
        shard_path = self.path / SHARD_DIR
        if not (self.path / META_FILE).exists() or not shard_path.is_dir():
            raise NotFoundError(f"no embedded index at {self.path} (stores.embedded.path)")
        self._ownership.acquire()
        try:
            self._shard = _load_optimized(shard_path)
        except Exception as error:
            self._ownership.release()
            raise ServiceUnavailableError(
                f"cannot open the embedded index at {shard_path}: {error}"
            ) from None

    async def attach(self) -> None:
        await asyncio.to_thread(self._attach_sync)

    @property
    def shard(self) -> edge.EdgeShard:
        if self._shard is None:
            raise ServiceUnavailableError("the embedded index is not open")
        return self._shard

    def _close_sync(self) -> None:
        with self._write_lock:
            try:
                if self._shard is not None:
                    self._shard.flush()
                    self._shard.close()
            except Exception as error:  # a broken engine still lets go of the index
                log.warning("closing the embedded index at %s: %s", self.path, error)
            finally:
                self._shard = None
                self._ownership.release()

    async def close(self) -> None:
        await asyncio.to_thread(self._close_sync)

    async def healthy(self) -> bool:
        """Open, and its last write went through: an engine that refused a write (its files
        changed under it, a full disk) is not ready until a write succeeds again."""
        return self._shard is not None and self._write_failure is None

    def _engine_write(self, write: Any) -> Any:
        """``write()`` under the write lock; an engine error becomes STORE_UNAVAILABLE (503,
        readiness failing), not an internal error."""
        shard = self.shard
        with self._write_lock:
            try:
                result = write(shard)
                shard.flush()
            except Exception as error:
                self._write_failure = str(error)
                raise StoreUnavailableError(
                    f"the embedded index at {self.path} refused a write: {error}",
                    "the embedded index refused a write",
                ) from None
        self._write_failure = None
        return result

    def _update(self, operation: edge.UpdateOperation) -> None:
        self._engine_write(lambda shard: shard.update(operation))
