"""The store's own ceiling: CPU per query of retrieval next to the index, with no Serve around it.

    python benchmarks/store_retrieve.py --config gpu.yaml [--queries data/scifact] [--batch 1,4,16]
        [--duration 10] [--fusion rrf] [--profile] [--index-docs N] [--out benchmarks/results/store_retrieve]

Opens the index the configuration points at (as the store replica opens it), encodes up to
``--max-queries`` queries (SciFact test claims by default) with the configuration's models,
then runs ``IndexRetriever.retrieve_many`` (every strategy's search, fusion, the fetch of the
top ``--top-k``: the store replica's whole work for a query) back to back on one thread, in
batches of each ``--batch`` size (the replica's coalesced calls), for ``--duration`` seconds
each after a warm-up. Reports CPU and wall milliseconds per query, the rate of one event loop
doing nothing else (``1000 / wall ms``: the store replica's ceiling without Serve around it)
and queries per CPU-second (the CPU counts every thread of the process, the query encoders'
runtime included: on the H100 host of 2026-11-27 it exceeded wall, 5.1 against 3.8 ms a
query in batches of 16, where on a 2-core CPU host the two matched). ``--profile`` adds the functions
with the most own time (cProfile) over one more window of the first batch size.
``--index-docs N`` first indexes the first N SciFact abstracts (for a run without an index).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.load import load_queries  # noqa: E402
from benchmarks.processes import host_probe_ms  # noqa: E402
from benchmarks.reports import write_report  # noqa: E402
from serve_app.config import load_config  # noqa: E402
from serve_app.evaluation.beir import load_beir  # noqa: E402
from serve_app.pipelines.components import build_components  # noqa: E402
from serve_app.pipelines.ingest import IngestPipeline  # noqa: E402
from serve_app.pipelines.retrieval import IndexRetriever, RetrieveSpec  # noqa: E402
from serve_app.pipelines.search import SearchPipeline  # noqa: E402
from serve_app.schemas import FusionSpec  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"


async def windows(
    retriever: IndexRetriever, specs: list[RetrieveSpec], batch: int, seconds: float
) -> dict:
    """Batches of ``batch`` specs, in turn, back to back for ``seconds``."""
    done, position = 0, 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while time.perf_counter() - wall0 < seconds:
        chosen = [specs[(position + i) % len(specs)] for i in range(batch)]
        position += batch
        await retriever.retrieve_many(chosen)
        done += batch
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    return {
        "batch": batch,
        "queries": done,
        "cpu_ms_per_query": round(1000 * cpu / done, 3),
        "wall_ms_per_query": round(1000 * wall / done, 3),
        "qps_one_loop": round(done / wall, 1),
        "qps_per_cpu_second": round(done / cpu, 1) if cpu else None,
    }


def top_functions(profile: cProfile.Profile, count: int) -> list[dict]:
    stats = pstats.Stats(profile, stream=io.StringIO())
    total = sum(row[2] for row in stats.stats.values()) or 1.0  # type: ignore[attr-defined]
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:count]  # type: ignore[attr-defined]
    return [
        {"function": f"{name} ({Path(file).name}:{line})", "own_share": round(own / total, 3)}
        for (file, line, name), (_, _, own, _, _) in rows
    ]


async def measure(args: argparse.Namespace) -> dict:
    config = load_config(Path(args.config))
    tenant = args.tenant or config.api.auth.anonymous_tenant
    components = await build_components(config)
    try:
        if args.index_docs:
            corpus = load_beir(SCIFACT, "test", tenant, max_docs=args.index_docs).corpus
            await IngestPipeline(components).ingest(corpus[: args.index_docs])
        held = await components.index.count(tenant)
        if not held:
            raise SystemExit(f"the index of {args.config} holds no chunks for tenant {tenant!r}")
        pipeline = SearchPipeline(components)
        strategies = pipeline.strategies_for(
            args.strategies.split(",") if args.strategies else None
        )
        texts = load_queries(Path(args.queries))[: args.max_queries]
        vectors = await pipeline.encode_queries(texts, strategies)
        fusion = pipeline.fusion_for(FusionSpec(method=args.fusion))
        limit = max(config.search.candidates, args.top_k)
        specs = [
            RetrieveSpec(v, strategies, limit, tenant, fusion, fetch=args.top_k) for v in vectors
        ]
        retriever = IndexRetriever(components.index)
        batches = [int(b) for b in args.batch.split(",")]
        await windows(retriever, specs, batches[0], args.warmup)
        probe_before = host_probe_ms()
        results = [await windows(retriever, specs, b, args.duration) for b in batches]
        report = {
            "config": args.config,
            "chunks": held,
            "queries": len(specs),
            "strategies": strategies,
            "candidates": limit,
            "fusion": fusion.method,
            "top_k": args.top_k,
            "host_probe_ms": [probe_before, host_probe_ms()],
            "windows": results,
        }
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            await windows(retriever, specs, batches[0], args.duration)
            profile.disable()
            report["profile"] = top_functions(profile, 15)
        return report
    finally:
        await components.close()


def markdown(report: dict) -> list[str]:
    lines = [
        f"# Retrieval next to the index, one thread ({report['chunks']} chunks, "
        f"{'/'.join(report['strategies'])}, {report['candidates']} candidates, "
        f"{report['fusion']}, top {report['top_k']})",
        "",
        f"Host probe before / after: {report['host_probe_ms'][0]} / {report['host_probe_ms'][1]} ms",
        "",
        "| batch | queries | CPU ms/query | wall ms/query | queries/s, one loop | per CPU-second |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {w['batch']} | {w['queries']} | {w['cpu_ms_per_query']} | {w['wall_ms_per_query']} "
        f"| {w['qps_one_loop']} | {w['qps_per_cpu_second']} |"
        for w in report["windows"]
    ]
    if "profile" in report:
        lines += ["", "Own time (cProfile):", ""]
        lines += [f"- {f['own_share']:.1%} {f['function']}" for f in report["profile"]]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--queries", default=str(SCIFACT))
    parser.add_argument("--max-queries", type=int, default=300)
    parser.add_argument("--tenant", default=None, help="default: the anonymous tenant")
    parser.add_argument("--strategies", default=None, help="default: the configuration's")
    parser.add_argument("--fusion", default="rrf")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--batch", default="1,4,16")
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--index-docs", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "store_retrieve")
    args = parser.parse_args(argv)
    report = asyncio.run(measure(args))
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
