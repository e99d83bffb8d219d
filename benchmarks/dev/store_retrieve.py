"""The store's own ceiling: CPU per query of retrieval next to the index, with no Serve around.

    python -m benchmarks.dev.store_retrieve --config CONFIG [--queries DIR] [--batch 1,4,16]
        [--duration 10] [--fusion rrf] [--profile] [--index-docs N] [--out STEM]

Opens the index the configuration points at (as the store replica opens it), encodes 300
queries (SciFact test claims by default) with the configuration's models, then runs
``IndexRetriever.retrieve_many`` (every strategy's search, fusion, the fetch of the top 10:
the store replica's whole work for a query) back to back on one thread, in batches of each
``--batch`` size (the replica's merged calls), for ``--duration`` seconds each after a
warm-up. Reports CPU (every thread's, the encoders' runtime too) and wall ms per query, and
the rate of one event loop doing nothing else (the store replica's ceiling without Serve).
``--profile``: the functions with the most own time (cProfile) over one more window.
``--index-docs N`` first indexes the first N SciFact abstracts.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.processes import host_probe_ms
from benchmarks.report import default_stem, table, write_report
from benchmarks.runner import load_queries
from benchmarks.service import SCIFACT, add_run_arguments, app_config, config_data


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, required=True)
    add_run_arguments(parser, "--queries", config=None)
    parser.add_argument("--fusion", default="rrf")
    parser.add_argument("--batch", default="1,4,16")
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--index-docs", type=int, default=0)
    return parser


async def window(retriever: Any, specs: list[Any], batch: int, seconds: float) -> dict:
    """Batches of ``batch`` specs, in turn, back to back for ``seconds``."""
    done = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while time.perf_counter() - wall0 < seconds:
        await retriever.retrieve_many([specs[(done + i) % len(specs)] for i in range(batch)])
        done += batch
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {
        "batch": batch,
        "queries": done,
        "cpu_ms_per_query": round(1000 * cpu / done, 3),
        "wall_ms_per_query": round(1000 * wall / done, 3),
        "qps_one_loop": round(done / wall, 1),
    }


async def measure(args: argparse.Namespace) -> dict:
    from serve_app.evaluation.beir import load_beir
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.ingest import IngestPipeline
    from serve_app.pipelines.retrieval import IndexRetriever, RetrieveSpec
    from serve_app.pipelines.search import SearchPipeline
    from serve_app.schemas import FusionSpec, ScopeKey

    config = app_config(config_data(args.config), str(args.config))
    scope = ScopeKey(config.api.auth.anonymous_tenant)
    components = await build_components(config)
    try:
        if args.index_docs:
            corpus = load_beir(SCIFACT, "test", max_docs=args.index_docs).corpus
            await IngestPipeline(components).ingest(scope, corpus[: args.index_docs])
        if not (chunks := await components.index.count(scope)):
            raise SystemExit(f"the index of {args.config} holds no chunks for {scope!r}")
        pipeline = SearchPipeline(components)
        strategies = pipeline.strategies_for(None)
        vectors = await pipeline.encode_queries(load_queries(args.queries)[:300], strategies)
        fusion = pipeline.fusion_for(FusionSpec(method=args.fusion))
        limit = config.search.candidates
        specs = [RetrieveSpec(v, strategies, limit, scope, fusion, fetch=10) for v in vectors]
        retriever = IndexRetriever(components.index)
        batches = [int(b) for b in args.batch.split(",")]
        await window(retriever, specs, batches[0], min(args.duration, 3))  # warm-up
        probe = host_probe_ms()
        report = {"chunks": chunks, "strategies": strategies, "candidates": limit}
        report["windows"] = [await window(retriever, specs, b, args.duration) for b in batches]
        report["host_probe_ms"] = [probe, host_probe_ms()]
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            await window(retriever, specs, batches[0], args.duration)
            profile.disable()
            report["profile"] = top_functions(profile, 15)
        return report
    finally:
        await components.close()


def top_functions(profile: cProfile.Profile, count: int) -> list[dict]:
    stats: Any = pstats.Stats(profile, stream=io.StringIO())
    total = sum(row[2] for row in stats.stats.values()) or 1.0
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:count]
    return [
        {"function": f"{name} ({Path(file).name}:{line})", "own_share": round(own / total, 3)}
        for (file, line, name), (_, _, own, _, _) in rows
    ]


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parser().parse_args(argv)
    report = asyncio.run(measure(args))
    lines = [
        f"# Retrieval next to the index, one thread ({report['chunks']} chunks, "
        f"{'/'.join(report['strategies'])}, {report['candidates']} candidates, {args.fusion})",
        "",
        f"Host probe before / after: {' / '.join(map(str, report['host_probe_ms']))} ms",
        "",
        *table(
            ["batch", "queries", "CPU ms/query", "wall ms/query", "queries/s, one loop"],
            [list(w.values()) for w in report["windows"]],
        ),
    ]
    if "profile" in report:
        lines += ["", "Own time (cProfile):", ""]
        lines += [f"- {f['own_share']:.1%} {f['function']}" for f in report["profile"]]
    write_report(args.out or default_stem("store-retrieve"), report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
