"""What the HTTP API calls: the pipelines plus readiness checks, in-process or over Serve."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from serve_app.errors import (
    NotFoundError,
    ServeAppError,
    ServiceUnavailableError,
    collection_not_found,
)
from serve_app.generation.base import LLM
from serve_app.pipelines.answer import AnswerPipeline, Event
from serve_app.pipelines.components import Components
from serve_app.pipelines.ingest import ChunkBudget, IngestPipeline
from serve_app.pipelines.search import SearchPipeline
from serve_app.schemas import (
    DEFAULT_COLLECTION,
    AnswerRequest,
    Document,
    DocumentInfo,
    IngestResult,
    SearchRequest,
    SearchResponse,
)
from serve_app.stores.base import ScopeKey

log = logging.getLogger("serve_app.api")

# A readiness check returns normally when its dependency works and raises otherwise.
ReadinessCheck = Callable[[], Awaitable[None]]
# Called with (model name, batch stats) for batches that model deployments report.
BatchObserver = Callable[[str, dict], None]


def sub_batches(documents: list[Document], size: int, chars: int) -> list[list[Document]]:
    """Consecutive groups of at most ``size`` documents and ``chars`` characters (a document
    longer than ``chars`` alone in its group), in order."""
    groups: list[list[Document]] = []
    current: list[Document] = []
    budget = 0
    for document in documents:
        length = document.char_count()
        if current and (len(current) >= size or budget + length > chars):
            groups.append(current)
            current, budget = [], 0
        current.append(document)
        budget += length
    if current:
        groups.append(current)
    return groups


def _partial_failure(failure: BaseExceptionGroup, done: list[IngestResult]) -> BaseException:
    """The error of a failed upload, naming what its finished sub-batches wrote: they stay
    written (each document whole); the rest of the request wrote nothing."""
    errors = failure.exceptions
    error = next((e for e in errors if isinstance(e, ServeAppError)), errors[0])
    if isinstance(error, asyncio.CancelledError):
        return error
    if not isinstance(error, ServeAppError):
        return error
    written = [doc for part in done for doc in part.written]
    unchanged = [doc for part in done for doc in part.unchanged]
    error.details = {**(error.details or {}), "written": written, "unchanged": unchanged}
    if written or unchanged:
        error.message += (
            f"; {len(written)} documents of this request were written and {len(unchanged)} "
            "were unchanged before the failure (error.details); nothing else was written: "
            "retry the request (unchanged documents are skipped)"
        )
    else:
        error.message += "; nothing of this request was written"
    error.args = (error.message,)
    return error


class RetrievalService:
    def __init__(
        self,
        components: Components,
        checks: dict[str, ReadinessCheck] | None = None,
        llm: LLM | None = None,
    ) -> None:
        self.components = components
        self.config = components.config
        self.ingest_pipeline = IngestPipeline(components)
        self.search_pipeline = SearchPipeline(components)
        self.checks = checks or {"store": self._store_check}
        # Answers: the LLM in this process or a handle to its deployment (None: answers are
        # refused with 503 naming llm.enabled).
        self.llm = llm
        # Reported by /readyz but not gating it: without the LLM searches still work and
        # answers still return their results with an error event (docs/answers.md).
        self.advisory_checks: set[str] = set()
        check_llm = getattr(llm, "check_health", None)
        if check_llm is not None:
            self.checks = {**self.checks, "llm": check_llm}
            self.advisory_checks.add("llm")
        self.answer_pipeline = AnswerPipeline(self.config, llm, self.search, self._collection_names)
        self._ingest_slots: asyncio.Semaphore | None = None
        self._uploads = 0

    async def _store_check(self) -> None:
        if not await self.components.index.healthy():
            raise RuntimeError("store not healthy")

    async def ingest(self, key: ScopeKey, documents: list[Document]) -> IngestResult:
        """Validate everything, then ingest into ``key`` (resolved by the caller:
        ``scope``) in bounded sub-batches, a few at a time.

        Each document is written whole or not at all; if a later sub-batch fails, earlier
        ones stay written and a retry of the same request converges (idempotent ingest).
        Sub-batches of every upload share ``api.ingest_concurrency`` slots (backpressure at
        the ingress: the model replicas never hold more than that many document batches
        from this replica); past ``api.max_pending_uploads`` uploads are refused with 503.
        """
        self.ingest_pipeline.validate(documents)
        api = self.config.api
        if self._uploads >= api.max_pending_uploads:
            raise ServiceUnavailableError(
                f"{self._uploads} uploads are already being ingested here "
                "(api.max_pending_uploads); retry shortly"
            )
        if self._ingest_slots is None:
            self._ingest_slots = asyncio.Semaphore(api.ingest_concurrency)
        slots = self._ingest_slots

        async def one(batch: list[Document]) -> IngestResult:
            async with slots:
                result = await self.ingest_pipeline.ingest(key, batch, budget)
            done.append(result)
            return result

        done: list[IngestResult] = []
        budget = ChunkBudget(self.config.limits.max_chunks_per_request)
        self._uploads += 1
        try:
            batches = sub_batches(documents, api.ingest_batch_size, api.ingest_batch_chars)
            # A TaskGroup, not gather: the first failure (or the request's cancellation)
            # cancels every other sub-batch, so nothing of a failed request is written after
            # its answer. A sub-batch cancelled inside its store write is rolled back or
            # finished whole by the store (stores/index.py); none is left half-written.
            async with asyncio.TaskGroup() as group:
                for batch in batches:
                    group.create_task(one(batch))
        except BaseExceptionGroup as failure:
            raise _partial_failure(failure, done) from None
        finally:
            self._uploads -= 1
        parts = done
        merged = IngestResult(documents=len(documents))
        for part in parts:
            merged.chunks_written += part.chunks_written
            merged.written.extend(part.written)
            merged.unchanged.extend(part.unchanged)
            merged.stale_chunks_removed += part.stale_chunks_removed
            for stage, ms in part.timings_ms.items():
                merged.timings_ms[stage] = round(merged.timings_ms.get(stage, 0.0) + ms, 3)
        return merged

    async def search(self, request: SearchRequest, tenant_id: str) -> SearchResponse:
        """A named collection is confirmed inside the search's own store call, not by a
        lookup of its own (on Ray Serve a round trip outside the query's batch)."""
        return await self.search_pipeline.search(
            request, ScopeKey(tenant_id, request.collection)
        )

    async def check_answer(self, request: AnswerRequest, tenant_id: str) -> None:
        """What refuses an answer before its first byte (``AnswerPipeline.check``)."""
        await self.answer_pipeline.check(request, tenant_id)

    def answer_stream(
        self, request: AnswerRequest, tenant_id: str, bound_s: float
    ) -> AsyncIterator[Event]:
        """The answer's events, preparation included (``AnswerPipeline.stream``)."""
        return self.answer_pipeline.stream(request, tenant_id, bound_s)

    async def answer(
        self, request: AnswerRequest, tenant_id: str, bound_s: float | None = None
    ) -> dict[str, Any]:
        """The whole answer as one object (the JSON variant)."""
        return await self.answer_pipeline.answer(request, tenant_id, bound_s)

    async def get_document(
        self, tenant_id: str, doc_id: str, collection: str = DEFAULT_COLLECTION
    ) -> DocumentInfo:
        key = await self.scope(tenant_id, collection)
        info = await self.components.index.document_info(key, doc_id)
        if info is None:
            raise NotFoundError(f"document {doc_id!r} not found")
        return info

    async def delete_document(
        self, tenant_id: str, doc_id: str, collection: str = DEFAULT_COLLECTION
    ) -> int:
        key = await self.scope(tenant_id, collection)
        removed = await self.ingest_pipeline.delete(key, doc_id)
        if removed == 0:
            raise NotFoundError(f"document {doc_id!r} not found")
        return removed

    # -- named collections and inspection ------------------------------------------------
    async def scope(self, tenant_id: str, collection: str) -> ScopeKey:
        """The store scope of the tenant's collection; NotFoundError for one it lacks (another
        tenant's collection of the same name included); only a named one is looked up."""
        key = ScopeKey(tenant_id, collection)
        if not key.is_default and not await self.components.index.has_collection(key):
            raise collection_not_found(collection)
        return key

    async def _collection_names(self, tenant_id: str) -> list[str]:
        return [c["name"] for c in await self.list_collections(tenant_id)]

    async def list_collections(self, tenant_id: str) -> list[dict]:
        return await self.components.index.list_collections(ScopeKey(tenant_id))

    async def create_collection(self, tenant_id: str, name: str) -> dict:
        return await self.components.index.create_collection(ScopeKey(tenant_id, name))

    async def describe_collection(self, tenant_id: str, name: str) -> dict:
        """The collection with its chunk and document counts per store."""
        key = await self.scope(tenant_id, name)
        report = await self.components.index.inspect(key)
        listed = {c["name"]: c for c in await self.list_collections(tenant_id)}
        counts = next(
            (c for c in report["collections"] if c["collection"] == name),
            {"chunks": {}, "documents": {}, "models": None},
        )
        return {
            **listed[name],
            "chunks": counts["chunks"],
            "documents": counts["documents"],
            "models": counts["models"],
        }

    async def delete_collection(self, tenant_id: str, name: str) -> int:
        return await self.components.index.delete_collection(ScopeKey(tenant_id, name))

    async def inspect(self, tenant_id: str | None, collection: str | None) -> dict:
        selector = None if tenant_id is None else ScopeKey(tenant_id, collection)
        report = await self.components.index.inspect(selector)
        return {"topology": self.config.stores.topology, **report}

    async def readiness(self, timeout_s: float = 2.0) -> dict[str, str]:
        """name -> "ok", "failing" or "timeout", each check bounded by ``timeout_s``. The
        reason of a failure is logged, never returned: /readyz is unauthenticated."""

        async def run(name: str, check: ReadinessCheck) -> str:
            try:
                await asyncio.wait_for(check(), timeout_s)
                return "ok"
            except TimeoutError:
                log.warning("readiness check %r timed out after %ss", name, timeout_s)
                return "timeout"
            except Exception as error:
                log.warning("readiness check %r failed: %s: %s", name, type(error).__name__, error)
                return "failing"

        names = list(self.checks)
        results = await asyncio.gather(*(run(n, self.checks[n]) for n in names))
        return dict(zip(names, results, strict=True))
