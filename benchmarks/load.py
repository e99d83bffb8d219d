"""Search under load over HTTP: open loop, closed loop or a sweep (127.0.0.1 only).

    python -m benchmarks load --url http://127.0.0.1:8000 --rate 40 --duration 30 [--check-p95-ms 500]
    python -m benchmarks load --url http://127.0.0.1:8000 --concurrency 4 --duration 30
    python -m benchmarks load --url http://127.0.0.1:8000 --sweep --sweep-start 30 --sweep-step 5

Each request is a SearchRequest (three strategies, RRF, no rerank by default) with a query
taken in turn from ``--queries`` (SciFact test claims); latency runs from each request's due
time, the first ``--warmup`` seconds uncounted; a sweep also plots latency against load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from benchmarks.rawhttp import RawHttpPool
from benchmarks.report import beside, default_stem, plot, table, write_report
from benchmarks.runner import (
    LoadRunner,
    add_search_arguments,
    http_sender,
    load_queries,
    search_body,
    summarise,
    sweep,
    sweep_rates,
)
from benchmarks.service import add_run_arguments

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
COLUMNS = ("offered_qps", "achieved_qps", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms")


def loopback_url(url: str) -> str:
    if urlparse(url).hostname not in LOOPBACK:
        raise argparse.ArgumentTypeError(f"load goes to this machine only (127.0.0.1): {url!r}")
    return url


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, type=loopback_url)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--rate", type=float, help="open loop at this many queries per second")
    mode.add_argument("--concurrency", type=int, help="closed loop with this many clients")
    mode.add_argument("--sweep", action="store_true", help="raise the rate until unsustainable")
    parser.add_argument("--duration", type=float, default=30, help="seconds (per sweep step)")
    parser.add_argument("--warmup", type=float, default=3, help="seconds sent, not counted")
    add_run_arguments(parser, "--queries", config=None)
    add_search_arguments(parser)
    parser.add_argument("--api-key")
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--sweep-start", type=float, default=2)
    parser.add_argument("--sweep-step", type=float, default=2)
    parser.add_argument("--sweep-max", type=float, default=500)
    parser.add_argument("--cooldown", type=float, default=3)
    parser.add_argument("--check-p95-ms", type=float)


async def measure(
    url: str,
    queries: list[str],
    body: dict,
    *,
    rate: float | None = None,
    concurrency: int | None = None,
    rates: list[float] | None = None,
    duration_s: float,
    warmup_s: float,
    cooldown_s: float = 3.0,
    timeout_s: float = 30.0,
    headers: dict[str, str] | None = None,
) -> dict:
    """A sweep over ``rates``, else an open loop at ``rate``, else ``concurrency`` clients."""
    pool = RawHttpPool(url, headers)
    runner = LoadRunner(http_sender(pool), queries, body, timeout_s)
    try:
        if rates:
            report = await sweep(runner, rates, duration_s, warmup_s, cooldown_s)
        elif rate:
            samples, window = await runner.open_loop(rate, duration_s, warmup_s)
            report = {"mode": "open-loop", **summarise(samples, window, rate)}
        else:
            samples, window = await runner.closed_loop(concurrency or 1, duration_s, warmup_s)
            report = {"mode": "closed-loop", "concurrency": concurrency}
            report.update(summarise(samples, window, None))
        return {**report, "request": body, "stale_connection_retries": pool.stale_retries}
    finally:
        await pool.close()


def save(report: dict, stem: Path, title: str) -> None:
    """The load's report, with a latency-vs-load plot for a sweep."""
    lines = [f"# {title}", ""]
    if report["mode"] == "sweep":
        best = report["max_sustainable_qps"]
        lines += [f"Maximum sustainable QPS: **{best}** (achieved >= 97 % of offered, no errors, "]
        lines += ["P99 < 5 s, every lower step too)", ""]
        rows = [[p[c] for c in COLUMNS] + [p["errors"], p["sustainable"]] for p in report["points"]]
        lines += table([*COLUMNS, "errors", "sustainable"], rows)
    else:
        keys = ("concurrency", "requests", "errors", *COLUMNS)
        lines += table(["measure", "value"], [[k, report[k]] for k in keys if k in report])
    if stages := report.get("stage_ms_median"):
        lines += ["", "Median stage ms inside the ingress: " + json.dumps(stages)]
    write_report(stem, report, lines)
    if report["mode"] == "sweep" and report["points"]:
        axes = ("offered load (queries/s)", "latency (ms)")
        plot(beside(stem, ".png"), "Search latency vs offered load", axes,
             lambda ax: _draw_sweep(ax, report), log="y")  # fmt: skip


def _draw_sweep(ax: Any, report: dict) -> None:
    offered = [p["offered_qps"] for p in report["points"]]
    for key in ("p50_ms", "p95_ms", "p99_ms"):
        ax.plot(offered, [p[key] for p in report["points"]], marker="o", label=key[:3])
    ax.axhline(500, color="grey", linestyle="--", linewidth=1, label="500 ms")
    if report["max_sustainable_qps"]:
        ax.axvline(report["max_sustainable_qps"], color="red", linestyle=":", label="maximum")


def run(args: argparse.Namespace) -> int:
    queries = load_queries(args.queries)
    if not queries or not 0 < args.duration <= 3600:
        raise SystemExit(f"no queries in {args.queries}, or --duration not in (0, 3600] s")
    rates = args.sweep and sweep_rates(args.sweep_start, args.sweep_step, args.sweep_max)
    headers = {"X-API-Key": args.api_key} if args.api_key else None
    measuring = measure(
        args.url, queries, search_body(args), rate=args.rate, concurrency=args.concurrency,
        rates=rates or None, duration_s=args.duration, warmup_s=args.warmup,
        cooldown_s=args.cooldown, timeout_s=args.timeout, headers=headers,
    )  # fmt: skip
    report = asyncio.run(measuring)
    save(report, args.out or default_stem(f"load-{report['mode']}"), f"Load: {report['mode']}")
    p95 = report.get("p95_ms", float("inf"))
    if args.check_p95_ms is not None and not p95 <= args.check_p95_ms:
        print(f"FAIL: p95 {p95} ms > {args.check_p95_ms} ms", file=sys.stderr)
        return 1
    return 0
