"""Answers: understand the question, retrieve (one query or several, aggregated), then
generate a cited answer from numbered passages, as a stream of events.

Events, in order: ``metadata`` (the passages with their provenance, the filters and where
they came from, the sub-queries, stage timings), ``delta`` (text as the model writes it), then
``done`` (the answer, its citations mapped to chunks and checked, sentences without one,
usage, timings) or ``error`` (the generation failed or ran out of time; the results were
already sent). An irrelevant question, or one no document matches, ends early with one
``delta`` carrying a helpful message and ``done`` marked ``early_return``.

``check`` runs before any byte is sent (no LLM, an unknown collection, a prompt that cannot
fit, a replica whose slots and queue are full: error statuses) and returns the checked
request; ``stream`` then runs everything else on it (understanding, retrieval, the wait for a
slot, the generation), so a server-sent-events response can start at once and keep the
connection alive meanwhile. Nothing is checked twice.

The pipeline depends on the search pipeline and the collection registry below it, never on
the service above it. Every failure after ``check`` is an
``error`` event, an unexpected exception included; every generation opened is closed on every
way out (the end, an error, a deadline, the reader closing the iterator at any event).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, TypeVar

from serve_app.config import AppConfig
from serve_app.config.answer import HISTORY_TURN_TOKENS
from serve_app.errors import (
    OverloadedError,
    PromptTooLongError,
    ServeAppError,
    ServiceUnavailableError,
    TimeoutExceededError,
)
from serve_app.fusion.queries import aggregate_sub_queries, distinct_queries
from serve_app.generation.base import (
    LLM,
    GenerationParams,
    Message,
    TokenStream,
    generation_params,
)
from serve_app.generation.citations import CitationReport, check_citations
from serve_app.generation.prompts import (
    Passage,
    answer_messages,
    client_instructions,
    history_content,
    history_within,
    passages_sentences,
)
from serve_app.generation.understanding import (
    Understanding,
    parse_understanding,
    understanding_messages,
    understanding_schema,
)
from serve_app.pipelines.answer_events import (
    AnswerDelta,
    AnswerDone,
    AnswerError,
    AnswerEvent,
    AnswerMetadata,
    MultiQueryScores,
    PassageResult,
    Usage,
)
from serve_app.pipelines.scopes import existing_collection
from serve_app.pipelines.search import SearchPipeline
from serve_app.schemas import (
    DEFAULT_COLLECTION,
    QUERY_CHARS,
    AnswerRequest,
    ScopeKey,
    ScoredChunk,
    SearchFilters,
    SearchRequest,
)

log = logging.getLogger(__name__)

EarlyReason = Literal["irrelevant", "no_results"]
T = TypeVar("T")


class CollectionsRead(Protocol):
    """The part of the collection registry (``stores.protocols.CollectionRegistry``) that
    answers read."""

    async def has_collection(self, key: ScopeKey) -> bool: ...

    async def list_collections(self, tenant: ScopeKey) -> list[dict[str, Any]]: ...


IRRELEVANT = (
    "This question does not seem to be about {corpus}, so there is nothing to answer it "
    "from. Ask about what these documents cover, or search them with /v1/search."
)
NOTHING_FOUND = (
    "No passage matched this question{filtered}, so there is nothing to answer it from. "
    "Try other words{or_filters}."
)


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 1)


def similarity(item: ScoredChunk) -> float:
    """A [0, 1] similarity of a result for the multi-query blend: the reranker's score, else
    the dense cosine; ``nan`` when neither exists (filled in by ``result_similarities``)."""
    if item.rerank_score is not None:
        return item.rerank_score
    if "dense" in item.scores:
        return min(1.0, max(0.0, item.scores["dense"]))
    return float("nan")


def result_similarities(results: list[ScoredChunk]) -> list[tuple[str, float]]:
    """(doc id, similarity) of each result; without a reranker or dense score, the fused
    score min-max normalised within this list."""
    values = [similarity(r) for r in results]
    if any(v != v for v in values):  # nan: no absolute similarity in this list
        fused = [r.fused_score for r in results]
        low, high = min(fused, default=0.0), max(fused, default=0.0)
        values = [1.0 if high == low else (f - low) / (high - low) for f in fused]
    return [(r.chunk.doc_id, v) for r, v in zip(results, values, strict=True)]


def _result(
    passage: Passage, item: ScoredChunk, found_by: list[str], score: float
) -> PassageResult:
    chunk = passage.chunk
    return PassageResult(
        passage=passage.number,
        doc_id=chunk.doc_id,
        chunk_id=chunk.id,
        title=chunk.title,
        section=chunk.section,
        heading_chain=list(chunk.heading_chain),
        char_start=passage.char_start,
        char_end=passage.char_end,
        trimmed=passage.trimmed,
        source=chunk.source,
        metadata=chunk.metadata,
        score=score,
        scores=item.scores,
        ranks=item.ranks,
        found_by=found_by,
        text=passage.text,
    )


@dataclass(frozen=True)
class CheckedAnswer:
    """A request that ``AnswerPipeline.check`` let through: its scope (the caller's tenant and
    the collection asked for) and the earlier turns the prompt keeps (counted once, by the
    model's tokenizer)."""

    request: AnswerRequest
    scope: ScopeKey
    history: list[Message]


@dataclass
class PreparedAnswer:
    request: AnswerRequest
    started: float
    metadata: AnswerMetadata
    passages: list[Passage] = field(default_factory=list)
    early: tuple[EarlyReason, str] | None = None  # (reason, message)
    stream: TokenStream | None = None
    error: ServeAppError | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    deadline: float = float("inf")  # perf_counter time the whole answer must end by
    first_token_by: float = float("inf")  # perf_counter time of the first token's deadline

    def remaining_s(self, until: float | None = None) -> float:
        return max(0.0, min(self.deadline, until or self.deadline) - time.perf_counter())


class AnswerPipeline:
    def __init__(
        self,
        config: AppConfig,
        llm: LLM | None,
        search: SearchPipeline,
        collections: CollectionsRead,
    ) -> None:
        self.config = config
        self.llm = llm
        self.search = search
        self.collections = collections

    async def _collection_names(self, scope: ScopeKey) -> list[str]:
        """The names of the collections of ``scope``'s tenant (understanding chooses one)."""
        tenant = ScopeKey(scope.tenant)
        return [c["name"] for c in await self.collections.list_collections(tenant)]

    # -- before the first byte ----------------------------------------------------------------
    async def _understand(
        self,
        request: AnswerRequest,
        history: list[Message],
        reformulations: int,
        with_filters: bool,
        scope: ScopeKey,
        timeout_s: float,
    ) -> tuple[Understanding, ServeAppError | None]:
        settings = self.config.answer
        assert self.llm is not None
        explicit_collection = "collection" in request.model_fields_set
        collections = []
        if with_filters and not explicit_collection:
            collections = await self._collection_names(scope)
        messages = understanding_messages(
            request.question,
            history,
            settings.understanding,
            reformulations,
            collections,
            with_filters,
        )
        params = GenerationParams(
            max_tokens=settings.understanding.max_tokens,
            temperature=0.0,
            json_schema=understanding_schema(
                settings.understanding, reformulations, collections, with_filters
            ),
        )
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
        # arrives as the call finishes, and the answer would go on for a client that left.
        try:
            async with asyncio.timeout(timeout_s):
                completion = await self.llm.complete(messages, params)
        except OverloadedError:
            # Understanding is optional: a busy LLM costs it, not the answer (the generation
            # asks for its own slot, and is refused before any byte if there is none).
            log.warning("query understanding refused (overloaded); searching the question")
            return Understanding.fallback(request.question, "understanding: OVERLOADED"), None
        except TimeoutError:
            log.warning("query understanding timed out; searching the question as asked")
            return Understanding.fallback(request.question, "understanding: timed out"), None
        except ServeAppError as error:
            log.warning("query understanding failed (%s); searching the question", error.code)
            return Understanding.fallback(request.question, f"understanding: {error.code}"), error
        asked = "\n".join([*(m.content for m in history if m.role == "user"), request.question])
        found = parse_understanding(
            completion.text,
            request.question,
            settings.understanding,
            collections,
            reformulations,
            asked,
        )
        if not with_filters:
            found.is_relevant, found.filters, found.collection = True, None, None
        return found, None

    async def _retrieve(
        self,
        request: AnswerRequest,
        key: ScopeKey,
        sub_queries: list[str],
        filters: SearchFilters | None,
        top_k: int,
        timeout_s: float,
    ) -> tuple[list[Passage], list[PassageResult], dict[str, float], float | None]:
        """The passages, their results, the searches' timings and the best absolute
        similarity in the first sub-query's list (None without a reranker or dense score)."""
        multi = self.config.answer.multi_query
        per_query = max(multi.per_query_top_k, top_k) if len(sub_queries) > 1 else top_k
        # The collection exists: ``check`` looked it up, or understanding chose it from the
        # tenant's list.
        collection = key.collection or DEFAULT_COLLECTION
        searches = [
            self.search.search(
                SearchRequest(
                    query=query,
                    collection=collection,
                    top_k=per_query,
                    strategies=request.strategies,
                    fusion=request.fusion,
                    rerank=request.rerank,
                    filters=filters,
                ),
                key,
                confirmed=True,
            )
            for query in sub_queries
        ]
        responses = await _all(searches, timeout_s)
        timings = {
            f"search.{stage}": max(r.timings_ms.get(stage, 0.0) for r in responses)
            for stage in ("encode", "retrieve", "rerank", "total")
            if any(stage in r.timings_ms for r in responses)
        }
        absolute = [v for v in map(similarity, responses[0].results) if v == v]
        best = max(absolute) if absolute else None
        if len(sub_queries) == 1:
            items = responses[0].results[:top_k]
            passages = [Passage(i, item.chunk) for i, item in enumerate(items, 1)]
            results = [
                _result(p, item, sub_queries, item.score)
                for p, item in zip(passages, items, strict=True)
            ]
            return passages, results, timings, best
        documents = aggregate_sub_queries(
            [result_similarities(r.results) for r in responses],
            k=multi.rrf_k,
            similarity_weight=multi.similarity_weight,
            weights=[multi.question_weight] + [1.0] * (len(responses) - 1),
        )[:top_k]
        passages, results = [], []
        for number, document in enumerate(documents, 1):
            # The document's chunk where it ranked best (the earliest sub-query on a tie).
            q, _ = min(document.ranks.items(), key=lambda pair: (pair[1], pair[0]))
            item = next(r for r in responses[q].results if r.chunk.doc_id == document.doc_id)
            passage = Passage(number, item.chunk)
            passages.append(passage)
            entry = _result(
                passage, item, [sub_queries[i] for i in document.found_by], document.score
            )
            entry.multi_query = MultiQueryScores(
                rrf=document.rrf,
                normalized_rrf=document.normalized_rrf,
                avg_similarity=document.avg_similarity,
                ranks={sub_queries[i]: r for i, r in document.ranks.items()},
            )
            results.append(entry)
        return passages, results, timings, best

    async def _history(self, request: AnswerRequest) -> tuple[list[Message], int]:
        """The earlier turns within ``answer.history_tokens`` and the tokens that question and
        turns take; PromptTooLongError for a question over ``answer.max_question_tokens``
        (all counted by the model's tokenizer)."""
        assert self.llm is not None
        settings = self.config.answer
        contents = list(dict.fromkeys(history_content(t) for t in request.messages))
        # The client's instructions count as part of the question (answer.max_question_tokens).
        asked = request.question + client_instructions(request.instructions)
        question_tokens, *counts = await self.llm.count_tokens([asked, *contents])
        if question_tokens > settings.max_question_tokens:
            raise PromptTooLongError(
                f"the question{' and instructions' if request.instructions else ''} have "
                f"{question_tokens} tokens; the limit is {settings.max_question_tokens} "
                "(answer.max_question_tokens)"
            )
        tokens = dict(zip(contents, counts, strict=True))
        kept = history_within(
            request.messages, settings.history_tokens, tokens.__getitem__, HISTORY_TURN_TOKENS
        )
        markup = HISTORY_TURN_TOKENS * len(kept)
        return kept, question_tokens + markup + sum(tokens[t.content] for t in kept)

    def _check_allowance(self, request: AnswerRequest, asked_tokens: int) -> None:
        """Before any byte: the request's question and history (``asked_tokens``, counted),
        ``top_k`` passages at their allowance (``answer.max_passage_tokens`` and markup) and
        its ``max_tokens`` must fit ``llm.context_tokens``, else PromptTooLongError (422)
        naming the numbers; a ``top_k`` above the deployment's limit is a 422 INVALID_INPUT
        (``AnswerConfig.check_top_k``). Passages are packed within the allowance, so a request that
        passes fits (the exact prompt is counted again before generation)."""
        settings = self.config.answer
        top_k = request.top_k or settings.top_k
        window = self.config.llm.context_tokens
        settings.check_top_k(top_k, window)
        max_tokens = min(request.max_tokens or settings.max_tokens, settings.max_tokens_limit)
        worst = settings.worst_prompt_tokens(top_k, max_tokens)
        need = worst["total"] - worst["history"] - worst["question"] + asked_tokens
        if need > window:
            raise PromptTooLongError(
                f"top_k {top_k} passages (up to {worst['passages']} tokens), the question and "
                f"history ({asked_tokens}), the prompt's own text ({worst['fixed']}) and "
                f"max_tokens ({max_tokens}) need up to {need} tokens but the model's context "
                f"holds {window} (llm.context_tokens): ask for fewer passages, a shorter "
                "question or history, or fewer max_tokens"
            )

    async def _fit(self, passages: list[Passage], results: list[PassageResult]) -> list[Passage]:
        """Each passage within ``answer.max_passage_tokens`` (``Passage.fit``); its result
        entry then shows exactly the text and span the prompt holds."""
        assert self.llm is not None
        if not passages:
            return passages
        pieces = list(dict.fromkeys(passages_sentences([p.chunk for p in passages])))
        tokens = dict(zip(pieces, await self.llm.count_tokens(pieces), strict=True))
        limit = self.config.answer.max_passage_tokens
        fitted = [Passage.fit(p.number, p.chunk, limit, tokens.__getitem__) for p in passages]
        # Control text in a chunk reaches the model as the guard's marker: the passage, its
        # result and its citations show that, not the chunk's text.
        read = await self.llm.as_read([p.text for p in fitted])
        fitted = [
            p if shown == p.text else replace(p, read_as=shown)
            for p, shown in zip(fitted, read, strict=True)
        ]
        for entry, passage in zip(results, fitted, strict=True):
            entry.text, entry.char_end = passage.text, passage.char_end
            entry.trimmed = passage.trimmed
        return fitted

    async def _check_budget(self, messages: list[Message], max_tokens: int, top_k: int) -> int:
        """The prompt's tokens as the engine will read them; PromptTooLongError (422, before
        any byte is sent) when they and ``max_tokens`` exceed ``llm.context_tokens``."""
        assert self.llm is not None
        prompt_tokens = await self.llm.count_prompt_tokens(messages)
        window = self.config.llm.context_tokens
        if prompt_tokens + max_tokens > window:
            raise PromptTooLongError(
                f"the prompt ({prompt_tokens} tokens with top_k {top_k}) and max_tokens "
                f"({max_tokens}) need {prompt_tokens + max_tokens} tokens but the model's "
                f"context holds {window} (llm.context_tokens): ask for fewer passages, a "
                "shorter question or history, or fewer max_tokens"
            )
        return prompt_tokens

    async def check(self, request: AnswerRequest, key: ScopeKey) -> CheckedAnswer:
        """What can refuse an answer before any byte or generation: no LLM (503), a
        collection the tenant lacks (404), a prompt that cannot fit the model's context
        (422, ``_check_allowance``), a replica in this process whose slots and queue are full
        (429; through Ray Serve the replica's refusal is the stream's first event, which the
        doors answer with its status too). A named
        collection is one registry lookup."""
        if self.llm is None:
            raise ServiceUnavailableError(
                "answers need an LLM and this deployment has none (llm.enabled: false)"
            )
        if key.collection != request.collection:
            raise ValueError(f"the scope {key} is not the request's collection")
        await existing_collection(self.collections, key)
        history, asked_tokens = await self._history(request)
        self._check_allowance(request, asked_tokens)
        slots = getattr(self.llm, "slots", None)
        if slots is not None:
            slots.check()
        return CheckedAnswer(request, key, history)

    async def prepare(self, checked: CheckedAnswer, bound_s: float | None = None) -> PreparedAnswer:
        """Understanding, retrieval and the opening of the generation of a checked request,
        all within ``bound_s`` (the request's bound, at most ``answer.deadlines.total_s``).
        Raises the errors of the search."""
        started = time.perf_counter()
        request, scope, history = checked.request, checked.scope, checked.history
        assert self.llm is not None
        settings = self.config.answer
        total_s = min(settings.deadlines.total_s, bound_s or settings.deadlines.total_s)
        deadlines = settings.deadlines

        def within(stage_s: float) -> float:
            return max(0.0, min(stage_s, started + total_s - time.perf_counter()))

        understand = (
            settings.understanding.enabled if request.understand is None else request.understand
        )
        multi = settings.multi_query.enabled if request.multi_query is None else request.multi_query
        reformulations = settings.multi_query.queries if multi else 0
        timings: dict[str, float] = {}
        understood: Understanding | None = None
        llm_error: ServeAppError | None = None
        if understand or multi:
            begun = time.perf_counter()
            understood, llm_error = await self._understand(
                request,
                history,
                reformulations,
                understand,
                scope,
                within(deadlines.understand_s),
            )
            timings["understand"] = _ms(begun)
        judged_irrelevant = bool(
            understand and understood and understood.valid and not understood.is_relevant
        )
        floor = settings.understanding.relevance_floor
        # A judgment of "irrelevant" is checked against the index when a floor is set: the
        # question itself is searched, and the rest of that judgment (query, filters) unused.
        used = None if judged_irrelevant and floor is not None else understood
        # The question is searched as asked; the model's rewrite only for a follow-up, whose
        # references need the earlier turns. On SciFact the rewrite of a standalone question
        # lost 0.08-0.10 nDCG@10 against the question itself (docs/answers.md).
        rewrite = bool(used and understand and history)
        # A question longer than a search query (context a client put before it) is
        # searched by its end, where the question is.
        query = used.semantic_query if used and rewrite else request.question[-QUERY_CHARS:]
        sub_queries = (
            distinct_queries([query, *used.queries], 1 + reformulations)
            if multi and used
            else [query]
        )
        filters = request.filters
        source: Literal["request", "understanding"] | None = "request" if filters else None
        if filters is None and used is not None and used.filters is not None:
            filters, source = used.filters, "understanding"
        collection = request.collection
        if "collection" not in request.model_fields_set and used and used.collection:
            collection = used.collection
        metadata = AnswerMetadata(
            question=request.question,
            collection=collection,
            semantic_query=query,
            sub_queries=sub_queries,
            filters=filters.model_dump(exclude_none=True) if filters else None,
            filters_source=source,
            understanding=understood.report() if understood else None,
            history_turns=len(history),
            model=self.llm.model_id,
        )
        prepared = PreparedAnswer(
            request, started, metadata, timings_ms=timings, deadline=started + total_s
        )
        irrelevant: tuple[Literal["irrelevant"], str] = (
            "irrelevant",
            IRRELEVANT.format(corpus=settings.understanding.corpus),
        )
        if judged_irrelevant and floor is None:
            prepared.early = irrelevant
            return prepared
        begun = time.perf_counter()
        top_k = request.top_k or settings.top_k
        retrieve_s = within(deadlines.retrieve_s)
        try:
            passages, results, search_timings, best = await self._retrieve(
                request,
                ScopeKey(scope.tenant, collection or DEFAULT_COLLECTION),
                sub_queries,
                filters,
                top_k,
                retrieve_s,
            )
        except TimeoutError:
            raise TimeoutExceededError(
                f"retrieval did not finish within {retrieve_s:g}s "
                "(answer.deadlines.retrieve_s, or the answer's bound)"
            ) from None
        timings["retrieve"] = _ms(begun)
        timings.update(search_timings)
        if judged_irrelevant:
            assert metadata.understanding is not None and floor is not None
            overruled = best is not None and best >= floor
            metadata.understanding["relevance_check"] = {
                "best_similarity": None if best is None else round(best, 4),
                "floor": floor,
                "overruled": overruled,
            }
            if not overruled:
                prepared.early = irrelevant
                return prepared
        passages = await self._fit(passages, results)
        prepared.passages = passages
        metadata.top_k = top_k
        metadata.results = results
        if not passages:
            prepared.early = (
                "no_results",
                NOTHING_FOUND.format(
                    filtered=" and its filters" if filters else "",
                    or_filters=" or fewer filters" if filters else "",
                ),
            )
            return prepared
        if llm_error is not None and not isinstance(llm_error, TimeoutExceededError):
            prepared.error = llm_error  # the LLM failed moments ago: report it, keep results
            return prepared
        begun = time.perf_counter()
        # One deadline for the first token, the wait for a slot included: it runs from here.
        prepared.first_token_by = begun + settings.deadlines.first_token_s
        messages = answer_messages(request.question, passages, history, request.instructions)
        params = generation_params(
            request.sampling,
            max_tokens=min(request.max_tokens or settings.max_tokens, settings.max_tokens_limit),
            temperature=self.config.llm.temperature,
        )
        metadata.prompt_tokens = await self._check_budget(messages, params.max_tokens, top_k)
        try:
            async with asyncio.timeout(prepared.remaining_s(prepared.first_token_by)):
                prepared.stream = await self.llm.open_stream(messages, params)
        except OverloadedError:
            raise
        except TimeoutError:
            prepared.error = TimeoutExceededError(
                "no generation slot before the deadline ("
                + _deadline_name(prepared, settings.deadlines.first_token_s)
                + ")"
            )
        except ServeAppError as error:
            prepared.error = error
        timings["admit"] = _ms(begun)
        return prepared

    # -- the stream ---------------------------------------------------------------------------
    async def stream(
        self, checked: CheckedAnswer, bound_s: float | None = None
    ) -> AsyncIterator[AnswerEvent]:
        """The whole answer of a checked request as events, preparation included; a failure
        before the metadata is one ``error`` event (its body as the error status would carry
        it)."""
        prepared: PreparedAnswer | None = None
        events: AsyncIterator[AnswerEvent] | None = None
        try:
            try:
                prepared = await self.prepare(checked, bound_s)
            except ServeAppError as error:
                yield AnswerError.of(error)
                return
            except Exception as error:  # the stream must end with an event
                log.exception("an answer failed before its results")
                yield _unexpected(error)
                return
            events = self.events(prepared)
            async for event in events:
                yield event
        finally:
            if events is not None:
                await events.aclose()  # type: ignore[attr-defined]
            if prepared is not None and prepared.stream is not None:
                await prepared.stream.aclose()  # never iterated: still opened, still closed

    async def events(self, prepared: PreparedAnswer) -> AsyncIterator[AnswerEvent]:
        """The events of a prepared answer; closing this iterator at any event (the metadata
        included) stops the generation."""
        stream = prepared.stream
        try:
            async for event in self._events(prepared):
                yield event
        finally:
            if stream is not None:
                await stream.aclose()

    async def _events(self, prepared: PreparedAnswer) -> AsyncIterator[AnswerEvent]:
        timings = prepared.timings_ms
        timings["metadata"] = _ms(prepared.started)
        yield prepared.metadata.model_copy(update={"timings_ms": dict(timings)})
        if prepared.early is not None:
            reason, message = prepared.early
            yield AnswerDelta(text=message)
            yield self._done(prepared, message, early=reason)
            return
        if prepared.error is not None:
            yield AnswerError.of(prepared.error)
            return
        stream = prepared.stream
        assert stream is not None
        parts: list[str] = []
        tokens = aiter(stream)
        try:
            while True:
                until = prepared.deadline if parts else prepared.first_token_by
                try:
                    async with asyncio.timeout(prepared.remaining_s(until)):
                        delta = await anext(tokens)
                except StopAsyncIteration:
                    break
                if not parts:
                    timings["first_token"] = _ms(prepared.started)
                parts.append(delta)
                yield AnswerDelta(text=delta)
        except TimeoutError:
            first_token_s = self.config.answer.deadlines.first_token_s
            stage = _deadline_name(prepared, None if parts else first_token_s)
            yield AnswerError.of(TimeoutExceededError(f"the generation ran past {stage}"))
            return
        except ServeAppError as error:
            log.warning("generation failed after %d deltas: %s", len(parts), error.message)
            yield AnswerError.of(error)
            return
        except Exception as error:  # only an event can say it now
            log.exception("generation failed after %d deltas", len(parts))
            yield _unexpected(error)
            return
        yield self._done(prepared, "".join(parts))

    def _done(
        self, prepared: PreparedAnswer, answer: str, early: EarlyReason | None = None
    ) -> AnswerDone:
        stream = prepared.stream
        timings = prepared.timings_ms
        timings["total"] = _ms(prepared.started)
        if "first_token" in timings:
            timings["generate"] = round(timings["total"] - timings["first_token"], 1)
        report = check_citations(answer, prepared.passages) if early is None else CitationReport()
        return AnswerDone(
            answer=answer,
            **report.as_dict(),
            early_return=early,
            finish_reason=stream.finish_reason if stream else None,
            usage=(
                Usage(
                    prompt_tokens=stream.usage.prompt_tokens,
                    completion_tokens=stream.usage.completion_tokens,
                )
                if stream
                else None
            ),
            timings_ms=dict(timings),
        )

    async def answer(
        self, request: AnswerRequest, scope: ScopeKey, bound_s: float | None = None
    ) -> dict[str, Any]:
        """The non-streaming answer: the metadata and the ``done`` (or ``error``) event's
        fields in one object (``error`` null, or the error event's body and ``answer``
        null). The errors of ``check`` are raised."""
        return await self.collect(await self.check(request, scope), bound_s)

    async def collect(self, checked: CheckedAnswer, bound_s: float | None = None) -> dict[str, Any]:
        """The non-streaming answer of a checked request (as ``answer``)."""
        out: dict[str, Any] = {"error": None}
        async for event in self.stream(checked, bound_s):
            if isinstance(event, AnswerMetadata):
                out.update(event.data())
            elif isinstance(event, AnswerError):
                out["error"] = event.data()
                out["answer"] = None
            elif isinstance(event, AnswerDone):
                metadata_timings = out.get("timings_ms", {})
                out.update(event.data())
                out["timings_ms"] = {**metadata_timings, **event.timings_ms}
        return out


async def _all(calls: list[Coroutine[Any, Any, T]], timeout_s: float) -> list[T]:
    """Each call's result, in order, within ``timeout_s`` (else TimeoutError). The first
    failure cancels the others and is raised as itself; a timeout or a cancellation of the
    caller cancels every call and waits for it, so none is left running and no failure goes
    unread (``asyncio.gather`` under ``wait_for`` leaves its own failure unread when the caller
    is cancelled)."""
    try:
        async with asyncio.timeout(timeout_s), asyncio.TaskGroup() as group:
            tasks = [group.create_task(call) for call in calls]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [task.result() for task in tasks]


def _deadline_name(prepared: PreparedAnswer, stage_s: float | None) -> str:
    """Which bound ran out: the stage's own (``stage_s`` seconds) or the whole answer's."""
    if stage_s is not None and prepared.first_token_by <= prepared.deadline:
        return f"answer.deadlines.first_token_s, {stage_s:g}s"
    bound = prepared.deadline - prepared.started
    return f"the answer's bound of {bound:g}s (answer.deadlines.total_s or X-Request-Timeout-Ms)"


def _unexpected(error: Exception) -> AnswerError:
    return AnswerError.of(
        ServeAppError(
            f"the answer failed unexpectedly ({type(error).__name__}); the server log has it"
        )
    )
