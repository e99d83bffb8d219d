"""``serve-app eval``: nDCG@10, Recall@100 and MRR@10 on a BEIR folder, in process."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from serve_app.cli.common import progress
from serve_app.config import AppConfig


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    evaluate = sub.add_parser("eval", help="nDCG@10, Recall@100, MRR@10 on a BEIR folder")
    evaluate.add_argument("--beir", required=True, help="BEIR-layout folder")
    evaluate.add_argument("--split", default="test")
    evaluate.add_argument("--json", help="write the results as JSON to this path")
    evaluate.add_argument("--depth", type=int, default=1000, help="chunks retrieved per strategy")
    evaluate.add_argument("--strategies")
    evaluate.add_argument("--max-queries", type=int)
    evaluate.add_argument("--max-docs", type=int, help="judged documents plus others up to N")
    evaluate.add_argument(
        "--runs", help="folder for the TREC run files (default: <data_dir>/eval/runs)"
    )
    evaluate.add_argument(
        "--reuse-encodings",
        action="store_true",
        help="index the chunk vectors `serve-app tune` cached for this model setting "
        "(<data_dir>/tune/cache) instead of encoding them again; queries are encoded live",
    )


def eval_config(config: AppConfig, dataset: str) -> AppConfig:
    """The eval index lives apart from the service's, one per dataset (reused across runs)."""
    stores = config.stores
    eval_name = f"eval-{dataset}"
    qdrant_update: dict[str, Any] = {"collection": eval_name}
    if stores.qdrant.local_path and stores.qdrant.local_path != ":memory:":
        qdrant_update["local_path"] = f"eval/{dataset}-qdrant"
    stores = stores.model_copy(
        update={
            "embedded": stores.embedded.model_copy(update={"path": f"eval/{dataset}"}),
            "qdrant": stores.qdrant.model_copy(update=qdrant_update),
            "opensearch": stores.opensearch.model_copy(update={"index": eval_name}),
        }
    )
    return config.model_copy(update={"stores": stores})


async def run(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.evaluation.beir import load_beir
    from serve_app.evaluation.runner import (
        DEFAULT_RUN,
        default_run,
        ingest_corpus,
        retrieve_all,
        score_runs,
    )
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.ingest import IngestPipeline
    from serve_app.pipelines.search import SearchPipeline
    from serve_app.schemas import ScopeKey

    tenant = ScopeKey("eval")
    dataset = load_beir(args.beir, args.split, max_docs=args.max_docs)
    if args.max_queries:
        keep = sorted(dataset.queries)[: args.max_queries]
        dataset.queries = {q: dataset.queries[q] for q in keep}
        dataset.qrels = {q: dataset.qrels[q] for q in keep}
    config = eval_config(config, dataset.name)
    components = await build_components(config)
    try:
        reused: tuple[Any, ...] = ()
        if args.reuse_encodings:
            from serve_app.evaluation.encodings import reuse_document_encodings

            cache = config.data_path / "tune" / "cache"
            reused = reuse_document_encodings(components, cache)
        with progress(len(dataset.corpus), "index corpus", "doc") as bar:
            await ingest_corpus(IngestPipeline(components), tenant, dataset, progress=bar.update)
        for encoder in reused:
            print(f"{encoder.model_id}: {encoder.hits} chunk encodings reused from the cache")
        search = SearchPipeline(components)
        strategies = search.strategies_for(args.strategies.split(",") if args.strategies else None)
        with progress(len(dataset.queries), f"default search {args.split}", "query") as bar:
            default = await default_run(search, dataset, tenant, progress=bar.update)
        with progress(len(dataset.queries), f"retrieve {args.split}", "query") as bar:
            runs = await retrieve_all(search, dataset, strategies, args.depth, tenant, bar.update)
        report = score_runs(search, dataset, args.split, runs, strategies, default=default)
    finally:
        await components.close()

    width = max(len(name) for name in report.results)
    print(
        f"{dataset.name} ({args.split}, {config.stores.topology}): {report.queries} queries, "
        f"{report.documents} documents"
    )
    print(
        f"default = {report.default['name']}: what /v1/search answers with no parameters "
        f"({report.default['candidates']} candidates a strategy, chunk-level fusion"
        f"{', reranked' if report.default['rerank'] else ''}); the other runs fuse "
        f"documents from {args.depth} chunks a strategy"
    )
    print(f"{'run':<{width}}  nDCG@10  Recall@100  MRR@10")
    for name, metrics in report.results.items():
        print(
            f"{name:<{width}}  {metrics['ndcg@10']:.4f}   {metrics['recall@100']:.4f}    {metrics['mrr@10']:.4f}"
        )
    single, single_score = report.best([s for s in strategies if s in report.results])
    fused_names = [n for n in report.results if "(" in n]
    line = f"default {report.results[DEFAULT_RUN]['ndcg@10']:.4f}; best single: {single} {single_score:.4f}"
    if fused_names:
        fused, fused_score = report.best(fused_names)
        line += f"; best fused: {fused} {fused_score:.4f}"
    print(line)
    runs_dir = Path(args.runs) if args.runs else config.data_path / "eval" / "runs"
    written = report.write_runs(runs_dir / f"{dataset.name}-{args.split}")
    print(f"TREC run files: {len(written)} in {runs_dir / f'{dataset.name}-{args.split}'}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2))
    return 0
