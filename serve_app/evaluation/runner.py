"""Runs every strategy and every fusion over one retrieval per query and scores them.

Each query is encoded and retrieved once per strategy (``depth`` chunks each); chunk hits are
collapsed to documents (a document ranks where its best chunk ranks), and each fusion method
is applied to those document lists for every combination of two or more strategies.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from serve_app.evaluation.beir import BeirDataset
from serve_app.evaluation.metrics import evaluate_run
from serve_app.fusion import fuse
from serve_app.pipelines.ingest import IngestPipeline
from serve_app.pipelines.search import SearchPipeline
from serve_app.schemas import FUSION_METHODS, STRATEGIES, FusionSpec, Strategy

log = logging.getLogger(__name__)
Progress = Callable[[int], None]


@dataclass
class EvalReport:
    dataset: str
    split: str
    queries: int
    documents: int
    results: dict[str, dict[str, float]] = field(default_factory=dict)
    fusion_settings: dict[str, dict] = field(default_factory=dict)

    def best(self, names: list[str]) -> tuple[str, float]:
        name = max(names, key=lambda n: self.results[n]["ndcg@10"])
        return name, self.results[name]["ndcg@10"]

    def to_dict(self) -> dict:
        return {
            "dataset": self.dataset,
            "split": self.split,
            "queries": self.queries,
            "documents": self.documents,
            "results": self.results,
            "fusion_settings": self.fusion_settings,
        }


def fusion_name(method: str, strategies: tuple[str, ...]) -> str:
    return f"{method}({'+'.join(strategies)})"


def doc_ranking(hits: list) -> list[tuple[str, float]]:
    """Chunk hits (best first) -> documents at their best chunk's rank and score."""
    seen: dict[str, float] = {}
    for hit in hits:
        seen.setdefault(hit.doc_id, hit.score)
    return list(seen.items())


async def ingest_corpus(
    ingest: IngestPipeline,
    dataset: BeirDataset,
    batch_size: int = 64,
    progress: Progress | None = None,
) -> int:
    written = 0
    for start in range(0, len(dataset.corpus), batch_size):
        batch = dataset.corpus[start : start + batch_size]
        result = await ingest.ingest(batch)
        written += result.chunks_written
        if progress:
            progress(len(batch))
    return written


async def retrieve_all(
    search: SearchPipeline,
    dataset: BeirDataset,
    strategies: list[Strategy],
    depth: int,
    tenant_id: str,
    progress: Progress | None = None,
) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """query id -> strategy -> ranked (doc id, score)."""
    query_ids = sorted(dataset.queries)
    vectors = await search.encode_queries([dataset.queries[q] for q in query_ids], strategies)
    runs: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for query_id, query in zip(query_ids, vectors, strict=True):
        hits = await search.retrieve(query, strategies, depth, tenant_id)
        runs[query_id] = {s: doc_ranking(h) for s, h in hits.items()}
        if progress:
            progress(1)
    return runs


def score_runs(
    search: SearchPipeline,
    dataset: BeirDataset,
    split: str,
    runs: dict[str, dict[str, list[tuple[str, float]]]],
    strategies: list[Strategy],
    methods: tuple[str, ...] = FUSION_METHODS,
) -> EvalReport:
    report = EvalReport(dataset.name, split, len(dataset.queries), len(dataset.corpus))
    for strategy in strategies:
        run = {q: [d for d, _ in per[strategy]] for q, per in runs.items()}
        report.results[strategy] = evaluate_run(run, dataset.qrels)
    ordered = [s for s in STRATEGIES if s in strategies]
    for size in range(2, len(ordered) + 1):
        for combo in itertools.combinations(ordered, size):
            for method in methods:
                spec = search.fusion_for(FusionSpec(method=method))
                weights = {s: w for s, w in (spec.weights or {}).items() if s in combo} or None
                run = {
                    q: [
                        d
                        for d, _ in fuse(
                            method, {s: per[s] for s in combo}, k=spec.k or 60, weights=weights
                        )
                    ]
                    for q, per in runs.items()
                }
                name = fusion_name(method, combo)
                report.results[name] = evaluate_run(run, dataset.qrels)
                report.fusion_settings[name] = {"k": spec.k, "weights": weights or {}}
    return report
