"""One query's encoding in process: the pipeline's ``encode_queries`` against the encoders
called directly, one query at a time (latency, not throughput).

    python benchmarks/query_encoding.py [--queries 100] [--config config/local.yaml]

For each query (SciFact test claims), in turn: every encoder's blocking call on this thread
(``direct``), then ``SearchPipeline.encode_queries`` for each strategy alone and for all of
them together (what a search runs: the model queues' worker threads, the event loop). Reports
medians and the ratios pipeline / direct: per strategy against that encoder, and all
strategies against the sum of the direct calls (what running them one after another costs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.load import load_queries  # noqa: E402
from benchmarks.reports import write_report  # noqa: E402
from serve_app.config import load_config  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"


async def measure(args: argparse.Namespace) -> dict:
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.search import SearchPipeline

    config = load_config(args.config)
    config = config.model_copy(update={"data_dir": tempfile.mkdtemp(prefix="bench-qenc-")})
    components = await build_components(config)
    pipeline = SearchPipeline(components)
    strategies = config.enabled_strategies()
    direct = {
        "dense": lambda q: components.dense.encode_queries_sync([q]),
        "splade": lambda q: components.sparse["splade"].encode([q], config.splade.query_top_k),
        "bm25": lambda q: components.sparse["bm25"].encode_queries_sync([q]),
    }
    queries = load_queries(args.queries)[: args.count]
    samples: dict[str, list[float]] = {}

    def record(name: str, started: float) -> None:
        samples.setdefault(name, []).append((time.perf_counter() - started) * 1000)

    try:
        for query in queries[:5]:  # warm every path
            for strategy in strategies:
                direct[strategy](query)
            await pipeline.encode_queries([query], strategies)
        for query in queries:
            for strategy in strategies:
                started = time.perf_counter()
                direct[strategy](query)
                record(f"direct.{strategy}", started)
            for strategy in strategies:
                started = time.perf_counter()
                await pipeline.encode_queries([query], [strategy])
                record(f"pipeline.{strategy}", started)
            started = time.perf_counter()
            await pipeline.encode_queries([query], strategies)
            record("pipeline.all", started)
    finally:
        await components.close()
    medians = {k: round(statistics.median(v), 3) for k, v in samples.items()}
    ratios = {s: round(medians[f"pipeline.{s}"] / medians[f"direct.{s}"], 3) for s in strategies}
    ratios["all_vs_sum_of_direct"] = round(
        medians["pipeline.all"] / sum(medians[f"direct.{s}"] for s in strategies), 3
    )
    return {"queries": len(queries), "median_ms": medians, "pipeline_over_direct": ratios}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=str(ROOT / "config" / "local.yaml"))
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--queries", type=Path, default=SCIFACT)
    parser.add_argument("--out", type=Path, default=RESULTS / "query_encoding")
    args = parser.parse_args(argv)
    report = asyncio.run(measure(args))
    medians, ratios = report["median_ms"], report["pipeline_over_direct"]
    lines = [
        f"# One query's encoding in process ({report['queries']} SciFact claims, medians)",
        "",
        "| strategy | direct call ms | encode_queries ms | ratio |",
        "|---|---|---|---|",
    ]
    for strategy in [k for k in ratios if k != "all_vs_sum_of_direct"]:
        lines.append(
            f"| {strategy} | {medians[f'direct.{strategy}']} | "
            f"{medians[f'pipeline.{strategy}']} | {ratios[strategy]} |"
        )
    direct_sum = round(sum(medians[k] for k in medians if k.startswith("direct.")), 3)
    lines.append(
        f"| all (against the sum of direct calls) | {direct_sum} | {medians['pipeline.all']} | "
        f"{ratios['all_vs_sum_of_direct']} |"
    )
    write_report(args.out, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
