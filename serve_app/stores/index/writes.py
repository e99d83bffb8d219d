"""The write and delete algorithm of every topology, once.

Writes: a document is replaced as *write every new chunk to every store, then remove the
document's other chunks from every store*. The new chunks' payloads carry the new content
hash (and the chunk count), so a document is reported stored (``document_hashes``) only when
every store holds all its chunks under one hash; until then a retry rewrites it.

Interruptions: whatever ends a write early (a store error, a timeout, a client gone:
``CancelledError`` too), a recovery runs, shielded from cancellation and bounded in time:
before every store has the new chunks it removes them again (rolls back: the old version
stays served exactly), after that it finishes removing the old ones (rolls forward: the new
version is served exactly). Upserts are by chunk id, deletes by id or document: a retry after
anything converges with no duplicates. A delete, once started, is finished the same way.
While an update runs, both versions of that document can be served for a moment (between
the new chunks' write and the old ones' removal), never part of one; the ingest pipeline
derives chunk ids from the document's content hash, so two versions share no chunk.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from serve_app.errors import ServeAppError
from serve_app.schemas import ScopeKey
from serve_app.stores.index.topology import Topology
from serve_app.stores.values import DocumentWrite

log = logging.getLogger(__name__)


class StoreWrites(Topology):
    """Document writes and deletes across every store of the topology."""

    async def write_documents(self, scope: ScopeKey, writes: list[DocumentWrite]) -> int:
        if not writes:
            return 0
        doc_ids = [w.doc_id for w in writes]
        held = await self._held(scope, doc_ids)
        served = _intersect(held)
        new_ids = {w.doc_id: {e.chunk.id for e in w.chunks} for w in writes}
        committed = False
        try:
            for backend in self.backends:
                await self._step(backend.upsert(scope, writes))
            committed = True  # every store holds every new chunk: the new versions are whole
            await self._remove_old(scope, held, new_ids)
        except BaseException as error:
            if committed:
                recovery = self._remove_old(scope, held, new_ids)
            else:
                recovery = self._roll_back(scope, served, new_ids)
            recovered = await self._recover(recovery, f"write of {doc_ids[:3]}...")
            if isinstance(error, ServeAppError):
                if committed and recovered:
                    log.info("write of %s finished by its recovery after: %s", doc_ids, error)
                    return _removed(served, new_ids)
                raise error.noted(
                    "; the new versions are served but old chunks may remain; retry the "
                    "request to finish"
                    if committed
                    else "; the documents keep their previous version; retry the request"
                ) from error
            raise
        return _removed(served, new_ids)

    async def delete_document(self, scope: ScopeKey, doc_id: str) -> int:
        held = await self._held(scope, [doc_id])
        removed = len(_intersect(held).get(doc_id, ()))

        async def delete_everywhere() -> None:
            results = await asyncio.gather(
                *(b.delete_documents(scope, [doc_id]) for b in self.backends),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result

        # Once started, a delete is finished (bounded) even if the caller goes away; a store
        # that fails leaves the chunks in the others, where they are no longer served.
        task = asyncio.ensure_future(delete_everywhere())
        self._track(task)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            self._bound(task)
            raise
        return removed

    async def _held(self, scope: ScopeKey, doc_ids: list[str]) -> list[dict[str, set[str]]]:
        return list(await asyncio.gather(*(b.chunk_ids(scope, doc_ids) for b in self.backends)))

    async def _remove_old(
        self,
        scope: ScopeKey,
        held: list[dict[str, set[str]]],
        new_ids: dict[str, set[str]],
    ) -> None:
        for backend, backend_held in zip(self.backends, held, strict=True):
            old = [cid for doc, ids in backend_held.items() for cid in ids - new_ids[doc]]
            if old:
                await self._step(backend.delete_ids(scope, old))

    async def _roll_back(
        self, scope: ScopeKey, served: dict[str, set[str]], new_ids: dict[str, set[str]]
    ) -> None:
        # The chunks the old version did not have; an id both versions share stays.
        written = [cid for doc, ids in new_ids.items() for cid in ids - served.get(doc, set())]
        for backend in self.backends:
            if written:
                await backend.delete_ids(scope, written)

    async def _step(self, work: Awaitable[None]) -> None:
        """One store request of a write. If the caller is cancelled while it runs, the request
        still completes (within the recovery timeout) before the recovery starts: a request
        already sent must not land after the recovery that undoes it."""
        task = asyncio.ensure_future(work)
        task.add_done_callback(_retrieve_result)  # awaited below, or left to finish alone
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                await asyncio.wait([task], timeout=self.recovery_timeout_s)
            raise

    async def _recover(self, work: Awaitable[None], what: str) -> bool:
        """Run ``work`` shielded from the caller's cancellation, within the recovery timeout;
        True when it completed."""
        task = asyncio.ensure_future(work)
        self._track(task)
        try:
            await asyncio.wait_for(asyncio.shield(task), self.recovery_timeout_s)
            return True
        except asyncio.CancelledError:
            self._bound(task)  # cancelled again while recovering: it goes on, bounded
            raise
        except TimeoutError:
            task.cancel()
            log.error("recovery of the %s did not finish in %ss", what, self.recovery_timeout_s)
        except Exception as error:  # the original error is what the caller sees
            log.error("recovery of the %s failed: %s", what, error)
        return False

    def _track(self, task: asyncio.Task[Any]) -> None:
        self._recoveries.add(task)
        task.add_done_callback(self._recoveries.discard)
        task.add_done_callback(_log_failure)

    def _bound(self, task: asyncio.Task[Any]) -> None:
        asyncio.get_running_loop().call_later(self.recovery_timeout_s, task.cancel)


def _intersect(held: list[dict[str, set[str]]]) -> dict[str, set[str]]:
    """doc id -> chunk ids every store holds (what is served now)."""
    docs = set.intersection(*(set(h) for h in held)) if held else set()
    return {d: set.intersection(*(h[d] for h in held)) for d in docs}


def _removed(served: dict[str, set[str]], new_ids: dict[str, set[str]]) -> int:
    return sum(len(ids - new_ids.get(doc, set())) for doc, ids in served.items())


def _retrieve_result(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("store recovery failed: %s", task.exception())
