"""Runs every strategy and every fusion over one retrieval per query and scores them.

Each query is encoded and retrieved once per strategy (``depth`` chunks each); chunk hits are
collapsed to documents (a document ranks where its best chunk ranks), and each fusion method
is applied to those document lists for every combination of two or more strategies.

The ``default`` run is what a user gets: every query goes through ``SearchPipeline.search``
with no parameters (the configured strategies, fusion and candidates, chunk-level fusion as
``/v1/search`` does it, the reranker when the configuration turns it on), and the returned
chunks are collapsed to documents in their order.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from serve_app.evaluation.aggregation import aggregate
from serve_app.evaluation.beir import BeirDataset
from serve_app.evaluation.metrics import evaluate_run, write_trec_run
from serve_app.fusion.strategies import fuse
from serve_app.pipelines.ingest import IngestPipeline
from serve_app.pipelines.search import SearchPipeline
from serve_app.schemas import (
    FUSION_METHODS,
    STRATEGIES,
    FusionSpec,
    ScopeKey,
    SearchRequest,
    Strategy,
)
from serve_app.stores.values import Hit

log = logging.getLogger(__name__)
Progress = Callable[[int], None]
Run = dict[str, list[tuple[str, float]]]
DEFAULT_RUN = "default"
DEFAULT_RUN_DEPTH = 100
"""Documents the default run asks the search for (Recall@100 needs 100)."""


@dataclass
class EvalReport:
    dataset: str
    split: str
    queries: int
    documents: int
    results: dict[str, dict[str, float]] = field(default_factory=dict)
    fusion_settings: dict[str, dict] = field(default_factory=dict)
    runs: dict[str, Run] = field(default_factory=dict)
    default: dict = field(default_factory=dict)  # the default run's configuration

    def best(self, names: list[str]) -> tuple[str, float]:
        name = max(names, key=lambda n: self.results[n]["ndcg@10"])
        return name, self.results[name]["ndcg@10"]

    def to_dict(self) -> dict:
        return {
            "dataset": self.dataset,
            "split": self.split,
            "queries": self.queries,
            "documents": self.documents,
            "default": self.default,
            "results": self.results,
            "fusion_settings": self.fusion_settings,
        }

    def write_runs(self, folder: Path) -> list[Path]:
        """One TREC run file per run (``default.trec``, ``bm25.trec``, ``dbsf_bm25+dense.trec``)."""
        paths = []
        for name, run in self.runs.items():
            path = folder / f"{run_file_stem(name)}.trec"
            write_trec_run(path, run, run_file_stem(name))
            paths.append(path)
        return paths


def run_file_stem(name: str) -> str:
    return name.replace("(", "_").replace(")", "")


def default_name(spec: FusionSpec, strategies: list[Strategy]) -> str:
    """How the default configuration is named in reports: ``dbsf(bm25+dense) w=... k=...``."""
    name = fusion_name(spec.method, tuple(strategies)) if len(strategies) > 1 else strategies[0]
    weights = {s: w for s, w in (spec.weights or {}).items() if s in strategies}
    details = []
    if len(strategies) > 1 and spec.method == "rrf":
        details.append(f"k={spec.k}")
    if len(strategies) > 1 and weights and any(w != 1.0 for w in weights.values()):
        details.append("w=" + ",".join(f"{s}:{weights.get(s, 1.0):g}" for s in strategies))
    return " ".join([name, *details])


def fusion_name(method: str, strategies: tuple[str, ...]) -> str:
    return f"{method}({'+'.join(strategies)})"


def doc_ranking(hits: list[Hit]) -> list[tuple[str, float]]:
    """Chunk hits (best first) -> documents at their best chunk's rank and score."""
    return aggregate(((hit.doc_id, 0, hit.score) for hit in hits), "max")


async def ingest_corpus(
    ingest: IngestPipeline,
    scope: ScopeKey,
    dataset: BeirDataset,
    batch_size: int = 64,
    progress: Progress | None = None,
) -> int:
    written = 0
    for start in range(0, len(dataset.corpus), batch_size):
        batch = dataset.corpus[start : start + batch_size]
        result = await ingest.ingest(scope, batch)
        written += result.chunks_written
        if progress:
            progress(len(batch))
    return written


async def retrieve_all(
    search: SearchPipeline,
    dataset: BeirDataset,
    strategies: list[Strategy],
    depth: int,
    scope: ScopeKey,
    progress: Progress | None = None,
) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """query id -> strategy -> ranked (doc id, score)."""
    query_ids = sorted(dataset.queries)
    vectors = await search.encode_queries([dataset.queries[q] for q in query_ids], strategies)
    runs: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for query_id, query in zip(query_ids, vectors, strict=True):
        hits = await search.retrieve(query, strategies, depth, scope)
        runs[query_id] = {s: doc_ranking(h) for s, h in hits.items()}
        if progress:
            progress(1)
    return runs


async def default_run(
    search: SearchPipeline,
    dataset: BeirDataset,
    scope: ScopeKey,
    depth: int = DEFAULT_RUN_DEPTH,
    progress: Progress | None = None,
) -> Run:
    """query id -> ranked (doc id, score) from ``search.search`` with no parameters but
    ``top_k`` = ``depth``: the configured default, as ``/v1/search`` answers it."""
    run: Run = {}
    for query_id in sorted(dataset.queries):
        request = SearchRequest(query=dataset.queries[query_id], top_k=depth)
        response = await search.search(request, scope)
        run[query_id] = aggregate(
            ((r.chunk.doc_id, r.chunk.order, r.score) for r in response.results), "max"
        )
        if progress:
            progress(1)
    return run


def score_runs(
    search: SearchPipeline,
    dataset: BeirDataset,
    split: str,
    runs: dict[str, dict[str, list[tuple[str, float]]]],
    strategies: list[Strategy],
    methods: tuple[str, ...] = FUSION_METHODS,
    default: Run | None = None,
) -> EvalReport:
    """Scores every strategy and fusion of ``runs``; ``default`` (``default_run``'s) first."""
    report = EvalReport(dataset.name, split, len(dataset.queries), len(dataset.corpus))
    if default is not None:
        config = search.config.search
        spec = search.fusion_for(None)
        report.default = {
            "name": default_name(spec, list(config.strategies)),
            "strategies": list(config.strategies),
            "fusion": spec.model_dump(),
            "candidates": config.candidates,
            "rerank": config.rerank,
        }
        report.results[DEFAULT_RUN] = evaluate_run(default, dataset.qrels)
        report.runs[DEFAULT_RUN] = default
    for strategy in strategies:
        run = {q: per[strategy] for q, per in runs.items()}
        report.results[strategy] = evaluate_run(run, dataset.qrels)
        report.runs[strategy] = run
    ordered = [s for s in STRATEGIES if s in strategies]
    for size in range(2, len(ordered) + 1):
        for combo in itertools.combinations(ordered, size):
            for method in methods:
                spec = search.fusion_for(FusionSpec(method=method))
                weights = {s: w for s, w in (spec.weights or {}).items() if s in combo} or None
                run = {
                    q: fuse(method, {s: per[s] for s in combo}, k=spec.k or 60, weights=weights)
                    for q, per in runs.items()
                }
                name = fusion_name(method, combo)
                report.results[name] = evaluate_run(run, dataset.qrels)
                report.runs[name] = run
                report.fusion_settings[name] = {"k": spec.k, "weights": weights or {}}
    return report
