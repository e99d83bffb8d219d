"""Start-up time, memory and a per-stage latency breakdown of the local Ray Serve app.

    python benchmarks/serve_startup.py [--config config/local.yaml] [--docs 200] [--queries 50]

Starts Ray + the application on a free 127.0.0.1 port with a fresh data directory, times
until /readyz answers 200, ingests SciFact abstracts over HTTP, sends sequential searches
(one at a time: latency without queueing), and reads the resident memory of every Ray
process. Prints the figures and writes JSON + Markdown under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import httpx  # noqa: E402
import psutil  # noqa: E402

from benchmarks.processes import ray_processes  # noqa: E402
from serve_app.config import load_config  # noqa: E402
from serve_app.ports import free_port  # noqa: E402

SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
RESULTS = ROOT / "benchmarks" / "results"


def ray_rss_mb() -> dict[str, float]:
    """RSS of Ray's processes on this machine by kind (replicas by deployment name)."""
    totals: dict[str, float] = {}
    for pid, kind in ray_processes().items():
        try:
            rss = psutil.Process(pid).memory_info().rss / 2**20
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        totals[kind] = round(totals.get(kind, 0.0) + rss, 1)
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=str(ROOT / "config" / "local.yaml"))
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--out", default=str(RESULTS), help="folder for the JSON + Markdown report")
    args = parser.parse_args()

    from deployments.local import start, stop
    from deployments.settings import with_serve

    config = with_serve(load_config(args.config), port=free_port(), host="127.0.0.1")
    config = config.model_copy(
        update={
            "data_dir": tempfile.mkdtemp(prefix="bench-serve-"),
        }
    )
    began = time.perf_counter()
    url = start(config, num_cpus=2)
    with httpx.Client(base_url=url, timeout=300) as client:
        while client.get("/readyz").status_code != 200:
            time.sleep(0.2)
        ready_s = time.perf_counter() - began

        rows = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open()][: args.docs]
        documents = [{"id": r["_id"], "title": r["title"], "text": r["text"]} for r in rows]
        ingest_start = time.perf_counter()
        ingest = client.post("/v1/documents", json={"documents": documents}).json()
        ingest_s = time.perf_counter() - ingest_start

        queries = [json.loads(line)["text"] for line in (SCIFACT / "queries.jsonl").open()][
            : args.queries
        ]
        for query in queries[:5]:  # warm-up
            client.post("/v1/search", json={"query": query})
        latencies, stages = [], {}
        for query in queries:
            started = time.perf_counter()
            body = client.post("/v1/search", json={"query": query}).json()
            latencies.append((time.perf_counter() - started) * 1000)
            for stage, ms in body["timings_ms"].items():
                stages.setdefault(stage, []).append(ms)
        memory = ray_rss_mb()
    stop()

    report = {
        "ready_seconds": round(ready_s, 1),
        "ingest": {
            "documents": len(documents),
            "chunks": ingest["chunks_written"],
            "seconds": round(ingest_s, 1),
        },
        "search_http_ms": {
            "p50": round(statistics.median(latencies), 1),
            "p95": round(statistics.quantiles(latencies, n=20)[-1], 1),
            "mean": round(statistics.fmean(latencies), 1),
        },
        "stage_ms_median": {k: round(statistics.median(v), 2) for k, v in stages.items()},
        "rss_mb": memory,
        "rss_mb_total": round(sum(memory.values()), 1),
    }
    lines = [
        "# Local Ray Serve app: start-up, memory, latency breakdown",
        "",
        f"- ready after {report['ready_seconds']} s (ray.init + every deployment loaded + /readyz 200)",
        f"- ingest over HTTP: {len(documents)} abstracts, {ingest['chunks_written']} chunks in {report['ingest']['seconds']} s",
        f"- sequential search over HTTP: p50 {report['search_http_ms']['p50']} ms, p95 {report['search_http_ms']['p95']} ms",
        f"- resident memory, all Ray processes: {report['rss_mb_total']} MB",
        "",
        "| stage (median ms, inside the ingress) | ms |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in report["stage_ms_median"].items()],
        "",
        "| process | RSS MB |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in sorted(memory.items())],
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serve_startup.json").write_text(json.dumps(report, indent=2))
    (out / "serve_startup.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
