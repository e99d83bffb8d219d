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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.load import LoadRunner, load_queries, percentile, summarise  # noqa: E402
from serve_app.config import load_config  # noqa: E402
from serve_app.pipelines.components import build_components  # noqa: E402
from serve_app.pipelines.search import SearchPipeline  # noqa: E402
from serve_app.schemas import FusionSpec, SearchRequest  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


async def in_process(args: argparse.Namespace, queries: list[str]) -> dict:
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
    pipeline = SearchPipeline(components)
    strategies = args.strategies.split(",")
    counter = 0

    def request() -> SearchRequest:
        nonlocal counter
        counter += 1
        return SearchRequest(
            query=queries[counter % len(queries)],
            top_k=10,
            strategies=strategies,
            fusion=FusionSpec(method=args.fusion),
            rerank=False,
        )

    latencies: list[float] = []
    try:
        begin = time.perf_counter()
        counted_start = begin + args.warmup
        stop_at = counted_start + args.duration

        async def worker() -> None:
            while time.perf_counter() < stop_at:
                sent = time.perf_counter()
                await pipeline.search(request(), args.tenant)
                if sent >= counted_start:
                    latencies.append((time.perf_counter() - sent) * 1000)

        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        window = time.perf_counter() - counted_start
    finally:
        await components.close()
        shutil.rmtree(copy_root, ignore_errors=True)
    return {
        "requests": len(latencies),
        "achieved_qps": round(len(latencies) / window, 2),
        "p50_ms": round(percentile(latencies, 50), 1),
        "p95_ms": round(percentile(latencies, 95), 1),
        "p99_ms": round(percentile(latencies, 99), 1),
    }


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
    local = asyncio.run(in_process(args, queries))
    print("in-process:", json.dumps(local), flush=True)
    body = {
        "top_k": 10,
        "strategies": args.strategies.split(","),
        "fusion": {"method": args.fusion},
        "rerank": False,
    }
    headers = {"X-API-Key": args.api_key} if args.api_key else {}
    runner = LoadRunner(args.url, queries, body, 60, headers)
    samples, window = asyncio.run(runner.closed_loop(args.concurrency, args.duration, args.warmup))
    served = summarise(samples, window, None)
    print(
        "serve http:",
        json.dumps(
            {k: served[k] for k in ("achieved_qps", "p50_ms", "p95_ms", "p99_ms", "errors")}
        ),
    )
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
