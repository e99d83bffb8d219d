"""The store algorithm, once, over the backends of a topology.

Writes: a document is replaced as *write every new chunk to every store, then remove the
document's other chunks from every store*. The new chunks' payloads carry the new content
hash (and the chunk count), so a document is reported stored (``document_hashes``) only when
every store holds all its chunks under one hash; until then a retry rewrites it.

Reads: a chunk is served only when every store holds it (the final fetch asks every store).

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
from datetime import UTC, datetime
from typing import Any

from serve_app.errors import (
    ConfigError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    ServeAppError,
)
from serve_app.schemas import DEFAULT_COLLECTION, Chunk, DocumentInfo, SearchFilters, Strategy
from serve_app.stores.payloads import document_info_from, sample_payload
from serve_app.stores.protocols import Backend, ChunkBackend, Snapshots
from serve_app.stores.registry import registry_key
from serve_app.stores.scope import SCOPE_FIELDS, ScopeKey, payload_scope
from serve_app.stores.values import (
    DocumentWrite,
    Hit,
    IndexModels,
    QueryVectors,
    SearchQuery,
    StrategyQuery,
)

log = logging.getLogger(__name__)

RECOVERY_TIMEOUT_S = 30.0
_COUNT_PAGE = 1000


class StoreIndex:
    """A ``ChunkIndex`` over ``backends``; the first one that holds chunks serves fetches."""

    def __init__(
        self, backends: list[Backend], recovery_timeout_s: float = RECOVERY_TIMEOUT_S
    ) -> None:
        holders = [b for b in backends if getattr(b, "holds_chunks", False)]
        if not holders:
            raise ConfigError("a store topology needs one store that holds the chunks")
        self.backends = backends
        self.chunk_store: ChunkBackend = holders[0]  # type: ignore[assignment]
        self.strategies: tuple[Strategy, ...] = tuple(
            dict.fromkeys(s for b in backends for s in b.strategies)
        )
        self._route = {s: next(b for b in backends if s in b.strategies) for s in self.strategies}
        self.recovery_timeout_s = recovery_timeout_s
        self._recoveries: set[asyncio.Task[Any]] = set()

    # -- lifecycle ---------------------------------------------------------------------
    async def open(self, models: IndexModels) -> None:
        # Every store's open settles before this returns or raises: a plain gather would raise
        # the first refusal while another store's open went on creating its version behind
        # the caller's back (seen: the split topology's Qdrant alias still unset after the
        # opener had been refused by OpenSearch).
        opened = await asyncio.gather(
            *(b.open(models) for b in self.backends), return_exceptions=True
        )
        for outcome in opened:
            if isinstance(outcome, BaseException):
                raise outcome
        await self.chunk_store.open_registry()

    async def attach(self) -> None:
        """Open every store as it is, with no model guard (``inspect``, ``validate``)."""
        await asyncio.gather(*(b.attach() for b in self.backends))

    async def close(self) -> None:
        if self._recoveries:  # let interrupted writes finish their cleanup first
            await asyncio.wait(self._recoveries, timeout=self.recovery_timeout_s)
        await asyncio.gather(*(b.close() for b in self.backends))

    async def healthy(self) -> bool:
        return all(await asyncio.gather(*(b.healthy() for b in self.backends)))

    # -- writes --------------------------------------------------------------------------
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
                error.message = f"{error.message}; " + (
                    "the new versions are served but old chunks may remain; retry the "
                    "request to finish"
                    if committed
                    else "the documents keep their previous version; retry the request"
                )
                error.args = (error.message,)
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

    # -- reads ---------------------------------------------------------------------------
    async def document_hashes(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, str]:
        if not doc_ids:
            return {}
        states = await asyncio.gather(*(b.document_states(scope, doc_ids) for b in self.backends))
        complete: dict[str, str] = {}
        for doc in doc_ids:
            seen = [per[doc] for per in states if doc in per]
            whole = len(seen) == len(states) and all(stored == total for _, stored, total in seen)
            if whole and len({content_hash for content_hash, _, _ in seen}) == 1:
                complete[doc] = seen[0][0]
        return complete

    async def document_info(self, scope: ScopeKey, doc_id: str) -> DocumentInfo | None:
        payloads = await self.chunk_store.document_payloads(scope, doc_id)
        if len(self.backends) > 1 and payloads:
            ids = [p["id"] for p in payloads]
            present = await self._present_everywhere([(scope, ids)], skip=self.chunk_store)
            payloads = [p for p in payloads if p["id"] in present[0]]
        return document_info_from(scope, doc_id, payloads)

    async def search(
        self,
        strategy: Strategy,
        query: QueryVectors,
        limit: int,
        scope: ScopeKey,
        filters: SearchFilters | None = None,
    ) -> list[Hit]:
        return (await self.search_many([strategy], query, limit, scope, filters))[strategy]

    async def search_many(
        self,
        strategies: list[Strategy],
        query: QueryVectors,
        limit: int,
        scope: ScopeKey,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[Hit]]:
        (result,) = await self.search_batch([SearchQuery(strategies, query, limit, scope, filters)])
        return result

    async def search_batch(self, queries: list[SearchQuery]) -> list[dict[str, list[Hit]]]:
        per_backend: dict[int, list[tuple[int, StrategyQuery]]] = {}
        for position, q in enumerate(queries):
            for strategy in q.strategies:
                backend = self._route.get(strategy)
                if backend is None:
                    raise ValueError(f"this topology does not serve the {strategy!r} strategy")
                one = StrategyQuery(strategy, q.query, q.limit, q.scope, q.filters, q.doc_ids)
                per_backend.setdefault(id(backend), []).append((position, one))
        backends = {id(b): b for b in self.backends}
        keys = list(per_backend)
        answers = await asyncio.gather(
            *(backends[k].query([one for _, one in per_backend[k]]) for k in keys)
        )
        results: list[dict[str, list[Hit]]] = [{s: [] for s in q.strategies} for q in queries]
        for key, hits_per_query in zip(keys, answers, strict=True):
            for (position, one), hits in zip(per_backend[key], hits_per_query, strict=True):
                results[position][one.strategy] = hits
        return results

    async def fetch(self, scope: ScopeKey, chunk_ids: list[str]) -> list[Chunk]:
        return (await self.fetch_batch([(scope, chunk_ids)]))[0]

    async def fetch_batch(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[list[Chunk]]:
        if not any(ids for _, ids in requests):
            return [[] for _ in requests]
        found, present = await asyncio.gather(
            self.chunk_store.chunks(requests),
            self._present_everywhere(requests, skip=self.chunk_store),
        )
        return [
            [chunks[i] for i in ids if i in chunks and i in everywhere]
            for (_, ids), chunks, everywhere in zip(requests, found, present, strict=True)
        ]

    async def _present_everywhere(
        self, requests: list[tuple[ScopeKey, list[str]]], skip: Backend | None = None
    ) -> list[set[str]]:
        """Per request: the ids every backend (but ``skip``) holds in its scope."""
        others = [b for b in self.backends if b is not skip]
        if not others:
            return [set(ids) for _, ids in requests]
        answers = await asyncio.gather(*(b.present(requests) for b in others))
        return [set.intersection(*(a[i] for a in answers)) for i in range(len(requests))]

    async def count(self, scope: ScopeKey | None = None) -> int:
        if len(self.backends) == 1:
            return await self.backends[0].count(scope)
        # Chunks every store holds: page through one store's ids, confirm in the others.
        total, offset = 0, None
        while True:
            page, offset = await self.chunk_store.scroll_payloads(
                scope, SCOPE_FIELDS, offset, _COUNT_PAGE
            )
            by_scope: dict[ScopeKey, list[str]] = {}
            for chunk_id, payload in page:
                by_scope.setdefault(payload_scope(payload), []).append(chunk_id)
            if by_scope:
                present = await self._present_everywhere(
                    list(by_scope.items()), skip=self.chunk_store
                )
                total += sum(len(ids) for ids in present)
            if offset is None or not page:
                return total

    # -- inspection ----------------------------------------------------------------------
    async def inspect(self, selector: ScopeKey | None = None) -> dict[str, Any]:
        """What every store holds: its own report (``Backend.describe``), and per (tenant,
        collection) the chunks and documents it holds, for every tenant (``selector`` None),
        one tenant's collections (``ScopeKey(tenant, None)``), or one collection. Pages
        through the payloads of the selection."""
        tenant_id = None if selector is None else selector.tenant
        collection = None if selector is None else selector.collection
        reports = await asyncio.gather(*(self._inspect_one(b, selector) for b in self.backends))
        registry = await self._registry(tenant_id)
        binding = reports[0][0].get("binding")
        per_scope: dict[ScopeKey, dict[str, Any]] = {}
        for backend, (_, tallies) in zip(self.backends, reports, strict=True):
            for key, (chunks, docs) in tallies.items():
                entry = per_scope.setdefault(key, {"chunks": {}, "documents": {}})
                entry["chunks"][backend.name] = chunks
                entry["documents"][backend.name] = len(docs)
        for tenant, names in registry.items():
            for name in names:  # registered collections with nothing in them yet
                key = ScopeKey(tenant, name)
                if (tenant_id is None or tenant == tenant_id) and collection in (None, name):
                    per_scope.setdefault(key, {"chunks": {}, "documents": {}})
        collections = []
        for key in sorted(per_scope, key=_scope_order):
            record = registry.get(key.tenant, {}).get(key.collection or "")
            collections.append(
                {
                    "tenant_id": key.tenant,
                    "collection": key.collection,
                    "state": (record or {}).get("state", "ready"),
                    "models": binding,
                    "chunks": {
                        b.name: per_scope[key]["chunks"].get(b.name, 0) for b in self.backends
                    },
                    "documents": {
                        b.name: per_scope[key]["documents"].get(b.name, 0) for b in self.backends
                    },
                }
            )
        return {
            "strategies": list(self.strategies),
            "stores": [report for report, _ in reports],
            "collections": collections,
        }

    async def _inspect_one(
        self, backend: Backend, selector: ScopeKey | None
    ) -> tuple[dict[str, Any], dict[ScopeKey, tuple[int, set[str]]]]:
        report = await backend.describe()
        report["strategies"] = list(backend.strategies)
        tallies: dict[ScopeKey, tuple[int, set[str]]] = {}
        offset = None
        while True:
            page, offset = await backend.scroll_payloads(
                selector, [*SCOPE_FIELDS, "doc_id"], offset, _COUNT_PAGE
            )
            for _, payload in page:
                chunks, docs = tallies.get(payload_scope(payload), (0, set()))
                docs.add(payload.get("doc_id", ""))
                tallies[payload_scope(payload)] = (chunks + 1, docs)
            if offset is None or not page:
                break
        sample, _ = await backend.scroll_payloads(selector, None, None, 1)
        report["payload_fields"] = sample_payload(sample[0][1]) if sample else {}
        return report, tallies

    # -- named collections -------------------------------------------------------------
    async def _registry(self, tenant_id: str | None) -> dict[str, dict[str, dict[str, Any]]]:
        """tenant -> collection name -> record."""
        registry: dict[str, dict[str, dict[str, Any]]] = {}
        for record in await self.chunk_store.registry_records(tenant_id):
            registry.setdefault(record["tenant_id"], {})[record["name"]] = record
        return registry

    async def list_collections(self, tenant: ScopeKey) -> list[dict[str, Any]]:
        """The collections of ``tenant.tenant`` (``default`` always), oldest first."""
        named = (await self._registry(tenant.tenant)).get(tenant.tenant, {})
        found = [{"name": DEFAULT_COLLECTION, "created_at": None, "state": "ready"}]
        found += [
            {
                "name": name,
                "created_at": record.get("created_at"),
                "state": record.get("state", "ready"),
            }
            for name, record in sorted(
                named.items(), key=lambda item: (item[1].get("created_at") or "", item[0])
            )
        ]
        return found

    async def has_collection(self, key: ScopeKey) -> bool:
        if key.is_default:
            return True
        record = await self.chunk_store.registry_record(registry_key(key))
        return record is not None and record.get("state", "ready") == "ready"

    async def create_collection(self, key: ScopeKey) -> dict[str, Any]:
        """Register a collection; ConflictError when the tenant has it already (of
        concurrent creations of one name, through any store replica, exactly one succeeds).

        The record is created ``creating`` (it takes no writes yet), the scope is emptied,
        then it turns ``ready``: a write admitted just before an earlier collection of this
        name was deleted may have landed after that delete's sweep, and must not reappear."""
        name = _one_collection(key)
        record_key = registry_key(key)
        created_at = datetime.now(UTC).isoformat(timespec="seconds")
        record = {
            "tenant_id": key.tenant,
            "name": name,
            "created_at": created_at,
            "state": "creating",
        }
        if key.is_default or not await self.chunk_store.insert_registry_record(record_key, record):
            held = None if key.is_default else await self.chunk_store.registry_record(record_key)
            state = "being deleted" if (held or {}).get("state") == "deleting" else "exists"
            raise ConflictError(f"collection {name!r} {state} already")
        leftovers = await asyncio.gather(*(b.delete_scope(key) for b in self.backends))
        if any(leftovers):
            log.warning("removed %d leftover chunks of %s", max(leftovers), key)
        if not await self.chunk_store.update_registry_record(record_key, {"state": "ready"}):
            raise ConflictError(f"collection {name!r} was deleted while it was being created")
        return {"name": name, "state": "ready", "created_at": created_at}

    async def delete_collection(self, key: ScopeKey) -> int:
        """Remove a collection's chunks from every store, then the collection; returns the
        chunks removed (from the store holding the most). It is marked ``deleting`` first, so
        it takes no writes or searches meanwhile, and a failed delete is finished by a retry
        (as is a creation that died half-way: ``creating``)."""
        name = _one_collection(key)
        if key.is_default:
            raise InvalidInputError(
                "the default collection cannot be deleted; delete its documents instead"
            )
        record_key = registry_key(key)
        record = await self.chunk_store.registry_record(record_key)
        if (
            record is not None
            and record.get("state") != "deleting"
            and not await self.chunk_store.update_registry_record(record_key, {"state": "deleting"})
        ):
            record = None  # dropped meanwhile by a delete through another replica
        if record is None:
            raise NotFoundError(f"collection {name!r} not found")
        removed = await asyncio.gather(*(b.delete_scope(key) for b in self.backends))
        await self.chunk_store.drop_registry_record(record_key)
        return max(removed, default=0)

    # -- snapshots -----------------------------------------------------------------------
    def snapshot_stores(self) -> list[Snapshots]:
        """Every store, when each can snapshot itself; ConfigError otherwise."""
        stores: list[Snapshots] = [b for b in self.backends if isinstance(b, Snapshots)]
        if len(stores) != len(self.backends):
            names = [b.name for b in self.backends if not isinstance(b, Snapshots)]
            raise ConfigError(
                f"{', '.join(names)} has no snapshot API: stop the service and use "
                "serve-app backup / restore instead"
            )
        return stores


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


def _scope_order(key: ScopeKey) -> tuple[str, bool, str]:
    """Tenants in order, each one's ``default`` collection first."""
    return key.tenant, not key.is_default, key.collection or ""


def _one_collection(key: ScopeKey) -> str:
    if key.collection is None:
        raise InvalidInputError(f"{key} names every collection of its tenant, not one")
    return key.collection
