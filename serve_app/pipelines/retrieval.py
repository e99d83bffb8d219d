"""Retrieval as one step: every strategy's search, fusion and the fetch of the chunks that can
reach the answer, in one call to wherever the index lives.

``IndexRetriever`` runs it next to an index (in process, or inside the store replica of the
Serve app); the pipeline sees only the ``Retriever`` protocol, so on Ray Serve a query costs
one round trip to the store instead of two, and what crosses back is the handful of fused
candidates, not every strategy's hit list. Concurrent retrievals are coalesced into one
batch (``serve_app.batching.Coalescer``), so the per-call cost of the index (a thread hop, an
engine call, a network round trip) is paid once per batch under load.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, cast, runtime_checkable

from serve_app.batching import Coalescer
from serve_app.fusion.strategies import contributions, fuse
from serve_app.pipelines.scopes import missing_collections
from serve_app.schemas import Chunk, FusionSpec, ScopeKey, SearchFilters, Strategy
from serve_app.stores.base import Hit, QueryVectors, SearchQuery, ServingIndex


@dataclass
class RetrieveSpec:
    """One query's retrieval: candidates per strategy, the resolved fusion, how many fused
    results to fetch (``top_k``, or the rerank depth). A named collection (``scope`` not
    the tenant's default, which every tenant has) must exist and be ready for the query to
    run: that is checked in the same call, unless the caller looked it up already
    (``confirmed``: an answer's searches, after ``AnswerPipeline.check``)."""

    query: QueryVectors
    strategies: list[Strategy]
    limit: int
    scope: ScopeKey
    fusion: FusionSpec
    fetch: int
    filters: SearchFilters | None = None
    confirmed: bool = False


@dataclass
class Candidate:
    chunk: Chunk
    fused_score: float
    scores: dict[str, float]
    ranks: dict[str, int]
    contributions: dict[str, float] = field(default_factory=dict)


@dataclass
class Fusion:
    """One query's fused list (``[(chunk id, score)]`` best first) and, per strategy, each
    chunk's score and rank; ``shares``: what each strategy added to the fused score of the
    chunks that are fetched."""

    fused: list[tuple[str, float]]
    scores: dict[str, dict[str, float]]
    ranks: dict[str, dict[str, int]]
    shares: dict[str, dict[str, float]]


@dataclass
class Retrieved:
    """Fetched candidates in fused order (a chunk the store no longer holds is left out),
    the length of the fused list, and the time of each stage. ``collection_missing``: the
    spec's named collection does not exist (or is not ready), and nothing was searched."""

    candidates: list[Candidate]
    total: int
    timings_ms: dict[str, float] = field(default_factory=dict)
    collection_missing: bool = False


@runtime_checkable
class Retriever(Protocol):
    async def retrieve(self, spec: RetrieveSpec) -> Retrieved: ...


def fuse_hits(spec: RetrieveSpec, hits: dict[str, list[Hit]]) -> Fusion:
    """One query's hits fused, with the per-strategy view of its first ``spec.fetch``."""
    ranked = {s: [(h.chunk_id, h.score) for h in per] for s, per in hits.items()}
    k = spec.fusion.k or 60
    weights = cast("Mapping[str, float] | None", spec.fusion.weights or None)
    fused = fuse(spec.fusion.method, ranked, k=k, weights=weights)
    fetched = [cid for cid, _ in fused[: spec.fetch]]
    return Fusion(
        fused,
        scores={s: dict(lst) for s, lst in ranked.items()},
        ranks={s: {cid: r for r, (cid, _) in enumerate(lst, 1)} for s, lst in ranked.items()},
        shares=contributions(spec.fusion.method, ranked, fetched, k=k, weights=weights),
    )


class IndexRetriever:
    """Retrieval next to ``index``; ``retrieve`` coalesces concurrent calls into batches."""

    def __init__(self, index: ServingIndex, max_batch: int = 64) -> None:
        self.index = index
        self._coalescer: Coalescer[RetrieveSpec, Retrieved] = Coalescer(
            self.retrieve_many, max_items=max_batch, max_in_flight=2
        )

    async def retrieve(self, spec: RetrieveSpec) -> Retrieved:
        return await self._coalescer.submit(spec)

    async def retrieve_many(self, specs: Sequence[RetrieveSpec]) -> list[Retrieved]:
        """One batched search and one batched fetch for all of ``specs`` whose collection
        exists (each distinct named collection of the batch is looked up once)."""
        missing = await self._missing_collections(specs)
        if not missing:
            return await self._search_and_fetch(specs)
        live = [s for s in specs if s.scope not in missing]
        answers = iter(await self._search_and_fetch(live) if live else [])
        return [
            Retrieved([], 0, collection_missing=True) if s.scope in missing else next(answers)
            for s in specs
        ]

    async def _missing_collections(self, specs: Sequence[RetrieveSpec]) -> set[ScopeKey]:
        return await missing_collections(self.index, (s.scope for s in specs if not s.confirmed))

    async def _search_and_fetch(self, specs: Sequence[RetrieveSpec]) -> list[Retrieved]:
        started = time.perf_counter()
        searched = await self.index.search_batch(
            [
                SearchQuery(s.strategies, s.query, s.limit, s.scope, s.filters, doc_ids=False)
                for s in specs
            ]
        )
        fused_at = time.perf_counter()
        fusions = [fuse_hits(s, hits) for s, hits in zip(specs, searched, strict=True)]
        fetch_at = time.perf_counter()
        fetched = await self.index.fetch_batch(
            [
                (s.scope, [cid for cid, _ in fusion.fused[: s.fetch]])
                for s, fusion in zip(specs, fusions, strict=True)
            ]
        )
        done = time.perf_counter()
        timings = {
            "retrieve": round((fused_at - started) * 1000, 3),
            "fusion": round((fetch_at - fused_at) * 1000 / max(len(specs), 1), 3),
            "fetch": round((done - fetch_at) * 1000, 3),
        }
        results = []
        for spec, fusion, chunks in zip(specs, fusions, fetched, strict=True):
            by_id = {c.id: c for c in chunks}
            scores, ranks = fusion.scores, fusion.ranks
            candidates = [
                Candidate(
                    chunk=by_id[cid],
                    fused_score=score,
                    scores={s: scores[s][cid] for s in spec.strategies if cid in scores[s]},
                    ranks={s: ranks[s][cid] for s in spec.strategies if cid in ranks[s]},
                    contributions=fusion.shares[cid],
                )
                for cid, score in fusion.fused[: spec.fetch]
                if cid in by_id
            ]
            results.append(Retrieved(candidates, len(fusion.fused), dict(timings)))
        return results
