"""Whether the embedded engine's calls let the rest of the process run while they work.

    python benchmarks/store_gil.py [--chunks 5000] [--batch 8] [--fetch 1000] [--seconds 1]
    python benchmarks/store_gil.py --index .data/local/eval/scifact   # an index of yours

The store replica runs its engine calls either on a worker thread or inline on its event loop;
a worker thread only pays if the call releases the GIL. For each search-path call (one batch
of ``--batch`` queries x bm25, splade and dense, 100 candidates; one fetch of ``--fetch``
points with their payloads) this runs the call back to back for ``--seconds`` on one
thread while a second thread ticks a 1 ms timer, and reports the ticks the timer got per
second against its rate alone, and the longest gap between ticks. For contrast the same is
done with ``time.sleep`` of the call's own median length (a call that releases the GIL).
Index: a copy of ``--index`` (queries from its stored vectors, as ``store_optimize.py``), or
``--chunks`` synthetic chunks written through the store (``benchmarks/scale.py``'s vectors).
Prints and writes JSON + Markdown under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import qdrant_edge as edge

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.reports import write_report  # noqa: E402
from benchmarks.store_optimize import Ticker, prepare_index  # noqa: E402
from serve_app.config import EmbeddedStoreConfig  # noqa: E402
from serve_app.stores import qdrant_requests as qr  # noqa: E402
from serve_app.stores.embedded import EdgeBackend  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def beside(call: Callable[[], object], seconds: float) -> dict:
    """``call`` back to back for ``seconds`` beside a 1 ms ticker thread."""
    durations: list[float] = []
    with Ticker() as ticker:
        ticks_before = len(ticker.gaps)
        end = time.perf_counter() + seconds
        started = time.perf_counter()
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            call()
            durations.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - started
        window = ticker.gaps[ticks_before:]
    return {
        "calls": len(durations),
        "call_ms": round(statistics.median(durations) * 1000, 3),
        "busy_share": round(sum(durations) / elapsed, 3),
        "ticks_per_s": round(len(window) / elapsed, 1),
        "longest_gap_ms": round(max(window, default=elapsed) * 1000, 1),
    }


def alone_rate(seconds: float) -> float:
    with Ticker() as ticker:
        before = len(ticker.gaps)
        time.sleep(seconds)
        return (len(ticker.gaps) - before) / seconds


async def measure(args: argparse.Namespace) -> dict:
    config = EmbeddedStoreConfig()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store"
        _, queries = await prepare_index(path, args)
        backend = EdgeBackend(path, config)
        await backend.attach()
        shard = backend.shard
        request = edge.QueryBatchRequest([backend._request(qr.query_plan(q)) for q in queries])
        points, _ = shard.scroll(edge.ScrollRequest(limit=args.fetch, with_payload=False))
        ids = [p.id for p in points]
        calls: dict[str, Callable[[], object]] = {
            "query_batch": lambda: shard.query_batch(request),
            "retrieve": lambda: shard.retrieve(ids, with_payload=True, with_vector=False),
        }
        rows = {}
        for name, call in calls.items():
            call()
            rows[name] = beside(call, args.seconds)
            pause = rows[name]["call_ms"] / 1000
            rows[f"time.sleep({rows[name]['call_ms']} ms)"] = beside(
                lambda pause=pause: time.sleep(pause), args.seconds
            )
        info = shard.info()
        await backend.close()
    return {
        "index": str(args.index) if args.index else "synthetic",
        "points": info.points_count,
        "batch_queries": args.batch,
        "fetch_points": len(ids),
        "seconds": args.seconds,
        "ticks_per_s_alone": round(alone_rate(args.seconds), 1),
        "calls": rows,
    }


def markdown(report: dict) -> list[str]:
    lines = [
        f"# Embedded engine calls beside another thread ({report['points']} points, "
        f"{report['index']})",
        "",
        f"A 1 ms ticker thread alone: {report['ticks_per_s_alone']} ticks/s. "
        f"Search batch: {report['batch_queries']} queries x 3 strategies; fetch: "
        f"{report['fetch_points']} points with payloads; each call back to back for "
        f"{report['seconds']} s.",
        "",
        "| call | calls | median ms | busy share | ticker ticks/s beside it | longest gap ms |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in report["calls"].items():
        lines.append(
            f"| {name} | {row['calls']} | {row['call_ms']} | {row['busy_share']:.0%} | "
            f"{row['ticks_per_s']} | {row['longest_gap_ms']} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--index", type=Path, help="an embedded index directory (copied)")
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--fetch", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "store_gil")
    args = parser.parse_args(argv)
    report = asyncio.run(measure(args))
    lines = markdown(report)
    print("\n".join(lines))
    write_report(args.out, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
