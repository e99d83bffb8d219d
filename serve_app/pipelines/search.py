"""Search: encode the query per strategy -> retrieve per strategy -> fuse -> rerank.

Encoders run concurrently, then retrievers run concurrently; filters apply inside each
retriever. Every response carries per-strategy scores and ranks and per-stage timings.
"""

from __future__ import annotations

import asyncio
import time

from serve_app.errors import InvalidInputError
from serve_app.fusion import fuse
from serve_app.pipelines.components import Components
from serve_app.pipelines.timing import StageTimer
from serve_app.schemas import (
    FusionSpec,
    ScoredChunk,
    SearchFilters,
    SearchRequest,
    SearchResponse,
    Strategy,
)
from serve_app.stores.base import Hit, QueryVectors


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
        jobs = {}
        if "dense" in strategies:
            jobs["dense"] = timer.run("encode.dense", self.components.dense.embed_queries(texts))
        for name in ("splade", "bm25"):
            if name in strategies:
                jobs[name] = timer.run(
                    f"encode.{name}", self.components.sparse[name].encode_queries(texts)
                )
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
        tenant_id: str,
        filters: SearchFilters | None = None,
        timer: StageTimer | None = None,
    ) -> dict[str, list[Hit]]:
        timer = timer or StageTimer()
        search = self.components.index.search_many(strategies, query, limit, tenant_id, filters)
        return await timer.run("retrieve", search)

    # -- the request path --------------------------------------------------------------------
    async def search(self, request: SearchRequest, tenant_id: str) -> SearchResponse:
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
        hits = await self.retrieve(query, strategies, limit, tenant_id, request.filters, timer)

        fuse_start = time.perf_counter()
        ranked = {s: [(h.chunk_id, h.score) for h in per] for s, per in hits.items()}
        fused = fuse(fusion.method, ranked, k=fusion.k or 60, weights=fusion.weights or None)
        scores = {s: {cid: sc for cid, sc in lst} for s, lst in ranked.items()}
        ranks = {s: {cid: r for r, (cid, _) in enumerate(lst, 1)} for s, lst in ranked.items()}
        timer.record("fusion", fuse_start)

        # Only the chunks that can reach the answer are fetched: the rerank depth, or top_k.
        fetch_start = time.perf_counter()
        wanted = [c for c, _ in fused[: depth if rerank else request.top_k]]
        fetched = await self.components.index.fetch(tenant_id, wanted)
        chunks = {c.id: c for c in fetched}
        timer.record("fetch", fetch_start)

        rerank_scores: dict[str, float] = {}
        if rerank and fused:
            rerank_start = time.perf_counter()
            candidates = [item for item in fused[:depth] if item[0] in chunks]
            reranker = self.components.reranker
            assert reranker is not None
            values = await reranker.score(request.query, [chunks[c].text for c, _ in candidates])
            rerank_scores = dict(zip([c for c, _ in candidates], values, strict=True))
            fused_rank = {c: i for i, (c, _) in enumerate(candidates)}
            fused = sorted(
                candidates, key=lambda item: (-rerank_scores[item[0]], fused_rank[item[0]])
            )
            timer.record("rerank", rerank_start)

        results = [
            ScoredChunk(
                chunk=chunks[cid],
                score=rerank_scores.get(cid, fused_score),
                fused_score=fused_score,
                rerank_score=rerank_scores.get(cid),
                scores={s: scores[s][cid] for s in strategies if cid in scores[s]},
                ranks={s: ranks[s][cid] for s in strategies if cid in ranks[s]},
            )
            for cid, fused_score in fused[: request.top_k]
            if cid in chunks
        ]
        timer.record("total", started)
        return SearchResponse(
            query=request.query,
            results=results,
            fusion=fusion.method,
            reranked=bool(rerank_scores),
            strategies=strategies,
            total=len(fused),
            timings_ms=timer.timings_ms,
        )
