"""``RetrievalService``: the use cases over the pipelines and the collection registry, plus
readiness checks; the same object in process and in the Ray ingress."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel

from serve_app.errors import (
    ServiceUnavailableError,
    TenantLimitError,
)
from serve_app.generation.base import LLM
from serve_app.pipelines.answer import AnswerPipeline, CheckedAnswer
from serve_app.pipelines.answer_events import AnswerError, AnswerEvent
from serve_app.pipelines.components import Components
from serve_app.pipelines.ingest import ChunkBudget, IngestPipeline
from serve_app.pipelines.search import SearchPipeline
from serve_app.schemas import (
    AnswerRequest,
    Document,
    IngestResult,
    ScopeKey,
    SearchRequest,
    SearchResponse,
)
from serve_app.service.collections import CollectionService
from serve_app.service.tenant_limits import TenantSlots
from serve_app.service.uploads import partial_failure, sub_batches
from serve_app.single_flight import SingleFlight

log = logging.getLogger("serve_app.api")

CheckState = Literal["ok", "failing", "timeout"]


class Readiness(BaseModel):
    """The service's readiness: each check's state, and whether every gating one is ok."""

    ready: bool
    checks: dict[str, CheckState]


# A readiness check returns normally when its dependency works and raises otherwise.
ReadinessCheck = Callable[[], Awaitable[None]]
# Called with (model name, batch stats) for batches that model deployments report.
BatchObserver = Callable[[str, dict[str, Any]], None]


class RetrievalService(CollectionService):
    """Every use case: ingest, search and answer over the pipelines, the collection and
    document operations of ``CollectionService``, readiness."""

    def __init__(
        self,
        components: Components,
        checks: dict[str, ReadinessCheck] | None = None,
        llm: LLM | None = None,
    ) -> None:
        super().__init__(components.index, components.config)
        self.components = components
        tenants = components.config.api.tenants
        self.tenant_answers = TenantSlots(
            tenants.max_concurrent_answers,
            "answers",
            "api.tenants.max_concurrent_answers",
            tenants.retry_after_s,
        )
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
        self.answer_pipeline = AnswerPipeline(
            self.config, llm, self.search_pipeline, components.index
        )
        self._ingest_slots: asyncio.Semaphore | None = None
        self._uploads = 0
        self._readiness_runs: SingleFlight[Readiness] = SingleFlight()

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
            raise partial_failure(failure, done) from None
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

    async def search(self, request: SearchRequest, key: ScopeKey) -> SearchResponse:
        """Search ``key`` (the request's collection of the caller's tenant). A named
        collection is confirmed inside the search's own store call, not by a lookup of its
        own (on Ray Serve a round trip outside the query's batch)."""
        return await self.search_pipeline.search(request, key)

    async def check_answer(self, request: AnswerRequest, key: ScopeKey) -> CheckedAnswer:
        """What refuses an answer before its first byte (``AnswerPipeline.check``): once."""
        return await self.answer_pipeline.check(request, key)

    async def answer_stream(
        self, checked: CheckedAnswer, bound_s: float | None = None
    ) -> AsyncGenerator[AnswerEvent, None]:
        """The events of a checked answer, preparation included (``AnswerPipeline.stream``),
        within its tenant's answers in flight: past them, one ``TENANT_LIMIT`` error event
        (answered 429 before any byte)."""
        tenant = checked.scope.tenant
        try:
            self.tenant_answers.take(tenant)
        except TenantLimitError as refused:
            yield AnswerError(
                code=refused.code, message=refused.message, retry_after_s=refused.retry_after_s
            )
            return
        try:
            async for event in self.answer_pipeline.stream(checked, bound_s):
                yield event
        finally:
            self.tenant_answers.give(tenant)

    async def answer(self, checked: CheckedAnswer, bound_s: float | None = None) -> dict[str, Any]:
        """The whole answer of a checked request as one object (the JSON variant), within its
        tenant's answers in flight (TenantLimitError past them)."""
        with self.tenant_answers.hold(checked.scope.tenant):
            return await self.answer_pipeline.collect(checked, bound_s)

    async def readiness(self, timeout_s: float = 2.0) -> Readiness:
        """Each check's state, each bounded by ``timeout_s``, and whether the gating ones (all
        but ``advisory_checks``) are ``ok``. The reason of a failure is logged, never
        returned: /readyz is unauthenticated. Callers that come while the checks run share
        that run (a flood of /readyz costs one round of internal calls at a time, never one
        each); a caller that leaves does not cancel it for the others."""
        return await self._readiness_runs(lambda: self._readiness(timeout_s))

    async def _readiness(self, timeout_s: float) -> Readiness:

        async def run(name: str, check: ReadinessCheck) -> CheckState:
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
        checks = dict(zip(names, results, strict=True))
        gating = [state for name, state in checks.items() if name not in self.advisory_checks]
        return Readiness(ready=all(state == "ok" for state in gating), checks=checks)
