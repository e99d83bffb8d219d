"""Search: encode the query per strategy -> retrieve per strategy -> fuse -> rerank.

Encoders run concurrently, then retrievers run concurrently; filters apply inside each
retriever. Every response carries per-strategy scores and ranks and per-stage timings.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

from serve_app.errors import InvalidInputError, collection_not_found
from serve_app.pipelines.components import Components
from serve_app.pipelines.retrieval import RetrieveSpec
from serve_app.pipelines.timing import StageTimer
from serve_app.schemas import (
    FusionSpec,
    ScopeKey,
    ScoredChunk,
    SearchFilters,
    SearchRequest,
    SearchResponse,
    Strategy,
)
from serve_app.stores.base import Hit, QueryVectors, SearchQuery


class SearchPipeline:
    def __init__(self, components: Components) -> None:
        self.components = components
        self.config = components.config

    # -- building blocks (also used by evaluation) -----------------------------------------
    def strategies_for(self, requested: list[Strategy] | None) -> list[Strategy]:
        strategies = list(requested or self.config.search.strategies)
        enabled = self.config.enabled_strategies()
        disabled = [s for s in strategies if s not in enabled]
        if disabled:
            raise InvalidInputError(
                f"strategy {disabled[0]!r} is not enabled in this deployment; enabled: {enabled}"
            )
        return strategies

    def fusion_for(self, spec: FusionSpec | None) -> FusionSpec:
        """The request's fusion, completed from the preset for its method, then the defaults."""
        defaults = self.config.search.fusion
        method = spec.method if spec else defaults.method
        preset = self.config.search.fusion_presets.get(method)
        base = preset or (defaults if defaults.method == method else None)
        k = (spec.k if spec and spec.k else None) or (base.k if base else defaults.k)
        weights = (
            spec.weights if spec and spec.weights is not None else (base.weights if base else {})
        )
        return FusionSpec(method=method, k=k, weights=dict(weights))

    async def encode_queries(
        self, texts: list[str], strategies: list[Strategy], timer: StageTimer | None = None
    ) -> list[QueryVectors]:
        timer = timer or StageTimer()
        jobs: dict[str, Awaitable[Any]] = {}
        if "dense" in strategies:
            jobs["dense"] = timer.run("encode.dense", self.components.dense.embed_queries, texts)
        for name in ("splade", "bm25"):
            if name in strategies:
                jobs[name] = timer.run(
                    f"encode.{name}", self.components.sparse[name].encode_queries, texts
                )
        if len(jobs) == 1:  # no task to schedule for a single strategy
            outputs = {name: await job for name, job in jobs.items()}
        else:
            outputs = dict(zip(jobs, await asyncio.gather(*jobs.values()), strict=True))
        return [
            QueryVectors(
                text=text,
                dense=outputs["dense"][i] if "dense" in outputs else None,
                splade=outputs["splade"][i] if "splade" in outputs else None,
                bm25=outputs["bm25"][i] if "bm25" in outputs else None,
            )
            for i, text in enumerate(texts)
        ]

    async def retrieve(
        self,
        query: QueryVectors,
        strategies: list[Strategy],
        limit: int,
        scope: ScopeKey,
        filters: SearchFilters | None = None,
        timer: StageTimer | None = None,
    ) -> dict[str, list[Hit]]:
        timer = timer or StageTimer()
        batch = [SearchQuery(strategies, query, limit, scope, filters)]
        (hits,) = await timer.run("retrieve", self.components.index.search_batch, batch)
        return hits

    # -- the request path --------------------------------------------------------------------
    async def search(
        self,
        request: SearchRequest,
        scope: ScopeKey,
        confirmed: bool = False,
    ) -> SearchResponse:
        """Search ``scope``; NotFoundError when it is a named collection the tenant lacks
        (checked in the retrieval's own store call: ``RetrieveSpec``), unless the caller
        ``confirmed`` it already."""
        started = time.perf_counter()
        timer = StageTimer()
        strategies = self.strategies_for(request.strategies)
        fusion = self.fusion_for(request.fusion)
        rerank = self.config.search.rerank if request.rerank is None else request.rerank
        if rerank and self.components.reranker is None:
            raise InvalidInputError("rerank was requested but no reranker is configured")
        depth = max(request.top_k, self.config.reranker.depth if rerank else 0)
        limit = max(self.config.search.candidates, depth)

        encode_start = time.perf_counter()
        (query,) = await self.encode_queries([request.query], strategies, timer)
        timer.record("encode", encode_start)

        # Search, fusion and the fetch of what can reach the answer (the rerank depth, or
        # top_k) in one call to the retriever: one round trip to a remote store.
        retriever = self.components.retriever
        assert retriever is not None  # set by Components.__post_init__
        retrieved = await retriever.retrieve(
            RetrieveSpec(
                query=query,
                strategies=strategies,
                limit=limit,
                scope=scope,
                fusion=fusion,
                fetch=depth if rerank else request.top_k,
                filters=request.filters,
                confirmed=confirmed,
            )
        )
        if retrieved.collection_missing:
            raise collection_not_found(scope.collection or "")
        timer.timings_ms.update(retrieved.timings_ms)
        candidates = retrieved.candidates

        rerank_scores: list[float | None] = [None] * len(candidates)
        if rerank and candidates:
            rerank_start = time.perf_counter()
            reranker = self.components.reranker
            assert reranker is not None
            values = await reranker.score(request.query, [c.chunk.text for c in candidates])
            # Stable sort: ties in rerank score keep the fused order.
            order = sorted(range(len(candidates)), key=lambda i: -values[i])
            candidates = [candidates[i] for i in order]
            rerank_scores = [values[i] for i in order]
            timer.record("rerank", rerank_start)

        results = [
            ScoredChunk.model_construct(
                chunk=c.chunk,
                score=c.fused_score if rerank_score is None else rerank_score,
                fused_score=c.fused_score,
                rerank_score=rerank_score,
                scores=c.scores,
                ranks=c.ranks,
                contributions=c.contributions,
            )
            for c, rerank_score in zip(candidates, rerank_scores, strict=True)
        ][: request.top_k]
        timer.record("total", started)
        return SearchResponse(
            query=request.query,
            results=results,
            fusion=fusion.method,
            reranked=rerank and bool(candidates),
            strategies=strategies,
            total=retrieved.total,
            timings_ms=timer.timings_ms,
        )
