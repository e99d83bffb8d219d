"""Start-up time, memory and one query's stages on the local Ray Serve app.

    python -m benchmarks startup [--config config/local.yaml] [--docs 200] [--search-s 10]

Starts Ray and the application on a free 127.0.0.1 port with a fresh data directory, times
until every deployment answers (/readyz 200), ingests SciFact abstracts over HTTP, searches
one query at a time (latency without queueing) and reads the resident memory of this process
and every Ray process it started, by kind.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from benchmarks import load
from benchmarks.ingest import load_corpus, post_all
from benchmarks.processes import rss_mb_by_kind
from benchmarks.rawhttp import RawHttpPool
from benchmarks.report import default_stem, table, write_report
from benchmarks.runner import load_queries, search_body
from benchmarks.service import add_run_arguments, fresh_run, serving


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--search-s", type=float, default=10)


async def ingest(url: str, documents: list) -> dict:
    pool = RawHttpPool(url)
    try:
        return await post_all(pool, documents, len(documents), 1)
    finally:
        await pool.close()


def run(args: argparse.Namespace) -> int:
    began = time.perf_counter()
    with serving(fresh_run(args.config, "startup"), 2) as url:
        report: dict = {"ready_seconds": round(time.perf_counter() - began, 1)}
        report["ingest"] = asyncio.run(ingest(url, load_corpus(args.corpus, args.docs)))
        queries = load_queries(args.corpus)
        searching = load.measure(url, queries, search_body(), concurrency=1,
                                 duration_s=args.search_s, warmup_s=1)  # fmt: skip
        report["search"] = asyncio.run(searching)
        report["rss_mb"] = rss_mb_by_kind()
    ingested, search = report["ingest"], report["search"]
    write_report(args.out or default_stem("startup"), report, [
        "# Local Ray Serve app: start-up, memory, one query's stages",
        "",
        f"- ready after {report['ready_seconds']} s (Ray, every deployment, /readyz 200)",
        f"- ingest over HTTP: {ingested['documents']} documents, {ingested['chunks']} chunks in "
        f"{ingested['seconds']} s",
        f"- one search at a time over HTTP: p50 {search['p50_ms']} ms, p95 {search['p95_ms']} ms",
        f"- resident memory: {round(sum(report['rss_mb'].values()), 1)} MB",
        "",
        *table(["stage (median ms, inside the ingress)", "ms"], search["stage_ms_median"].items()),
        "",
        *table(["process", "RSS MB"], report["rss_mb"].items()),
    ])  # fmt: skip
    return 0
