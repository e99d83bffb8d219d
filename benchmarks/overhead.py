"""Serve overhead: the HTTP path through Ray Serve against the in-process search pipeline,
on the same index, same machine, same closed-loop concurrency and the same queries.

    python benchmarks/overhead.py --url http://127.0.0.1:8000 --index-dir .data/local/eval/scifact \
        --tenant eval [--concurrency 4] [--duration 30]

The in-process side opens a copy of the served index (the embedded engine locks its
directory), so both sides search identical data. Runs the in-process pipeline first, then the
HTTP path, never both at once. Reports throughput and P95 of each and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.inprocess import pipeline_sender  # noqa: E402
from benchmarks.load import LoadRunner, http_sender, load_queries, summarise  # noqa: E402
from benchmarks.rawhttp import RawHttpPool  # noqa: E402
from serve_app.config import load_config  # noqa: E402
from serve_app.pipelines.components import build_components  # noqa: E402
from serve_app.pipelines.search import SearchPipeline  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def _brief(report: dict) -> dict:
    return {k: report[k] for k in ("achieved_qps", "p50_ms", "p95_ms", "p99_ms", "errors")}


async def in_process(args: argparse.Namespace, queries: list[str], body: dict) -> dict:
    config = load_config(args.config)
    copy_root = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    shutil.copytree(args.index_dir, copy_root / "index")
    store = config.stores.embedded.model_copy(update={"path": "index"})
    config = config.model_copy(
        update={
            "data_dir": str(copy_root),
            "stores": config.stores.model_copy(update={"embedded": store}),
        }
    )
    components = await build_components(config)
    runner = LoadRunner(pipeline_sender(SearchPipeline(components), args.tenant), queries, body, 60)
    try:
        samples, window = await runner.closed_loop(args.concurrency, args.duration, args.warmup)
    finally:
        await components.close()
        shutil.rmtree(copy_root, ignore_errors=True)
    return summarise(samples, window, None)


async def over_http(args: argparse.Namespace, queries: list[str], body: dict) -> dict:
    headers = {"X-API-Key": args.api_key} if args.api_key else {}
    pool = RawHttpPool(args.url, headers)
    try:
        runner = LoadRunner(http_sender(pool), queries, body, 60)
        samples, window = await runner.closed_loop(args.concurrency, args.duration, args.warmup)
    finally:
        await pool.close()
    return summarise(samples, window, None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", required=True)
    parser.add_argument("--index-dir", required=True, help="the served embedded index directory")
    parser.add_argument("--tenant", default="default")
    parser.add_argument("--config", default=str(ROOT / "config" / "local.yaml"))
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--duration", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--queries", type=Path, default=ROOT.parent / "shared" / "data" / "scifact")
    parser.add_argument("--fusion", default="rrf")
    parser.add_argument("--strategies", default="bm25,splade,dense")
    parser.add_argument("--api-key")
    parser.add_argument("--json", type=Path, default=RESULTS / "overhead.json")
    args = parser.parse_args(argv)

    queries = load_queries(args.queries)
    body = {
        "top_k": 10,
        "strategies": args.strategies.split(","),
        "fusion": {"method": args.fusion},
        "rerank": False,
    }
    local = asyncio.run(in_process(args, queries, body))
    print("in-process:", json.dumps(_brief(local)), flush=True)
    served = asyncio.run(over_http(args, queries, body))
    print("serve http:", json.dumps(_brief(served)), flush=True)
    report = {
        "concurrency": args.concurrency,
        "duration_s": args.duration,
        "in_process": local,
        "serve_http": served,
        "throughput_ratio": round(served["achieved_qps"] / local["achieved_qps"], 3),
        "p95_ratio": round(served["p95_ms"] / local["p95_ms"], 3),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))
    stages = served.get("stage_ms_median", {})
    lines = [
        f"# Serve overhead (closed loop, concurrency {args.concurrency}, {args.duration:g} s each)",
        "",
        "| path | QPS | p50 ms | p95 ms | p99 ms |",
        "|---|---|---|---|---|",
        f"| in-process pipeline | {local['achieved_qps']} | {local['p50_ms']} | {local['p95_ms']} | {local['p99_ms']} |",
        f"| Ray Serve over HTTP | {served['achieved_qps']} | {served['p50_ms']} | {served['p95_ms']} | {served['p99_ms']} |",
        "",
        f"Serve throughput / in-process: **{report['throughput_ratio']:.1%}**; P95 ratio {report['p95_ratio']}",
        "",
        "Where the Serve path's time goes (median ms inside the ingress): " + json.dumps(stages),
    ]
    args.json.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
