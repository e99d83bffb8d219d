"""Search while the service indexes at full speed: the `make run` path, measured.

    python benchmarks/search_during_ingest.py [--rate 2] [--duration 180] [--folder PLOS]
        [--config config/local.yaml] [--out benchmarks/results/search_during_ingest]

Starts ``serve-app --config CONFIG serve --ingest FOLDER`` (exactly what ``make run`` runs, on a
free 127.0.0.1 port and a fresh data directory), waits until it serves, then sends searches
as an open loop at ``--rate`` queries per second (SciFact test claims; three strategies, RRF)
while the start-up ingest runs, for ``--duration`` seconds or until the ingest finishes.
Reports search latency (P50/P95/P99 from each request's due time), errors by code (504 =
TIMEOUT), and how far the ingest got; then stops the service with SIGINT and times that.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from benchmarks.load import LoadRunner, http_sender, load_queries, summarise  # noqa: E402
from benchmarks.rawhttp import RawHttpPool  # noqa: E402
from benchmarks.reports import write_report  # noqa: E402
from serve_app.ports import free_port  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PLOS = ROOT.parent / "shared" / "data" / "plos_fulltext"
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
PROGRESS = re.compile(r"ingested (\d+)/(\d+) files")


class ServiceLog:
    """The service's output, read in a thread: readiness and ingest progress."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.ingest_done = threading.Event()
        self.files_done = 0
        self.files_total = 0
        threading.Thread(target=self._read, args=(process,), daemon=True).start()

    def _read(self, process: subprocess.Popen) -> None:
        for raw in process.stdout:  # type: ignore[union-attr]
            line = raw.rstrip()
            self.lines.append(line)
            if "serving on" in line:
                self.ready.set()
            if match := PROGRESS.search(line):
                self.files_done, self.files_total = int(match[1]), int(match[2])
            if line.startswith("ingested ") and "files:" in line:
                self.ingest_done.set()


async def search_while_ingesting(
    url: str, args: argparse.Namespace, log: ServiceLog, queries: list[str]
) -> tuple[list, float]:
    body = {"top_k": 10, "strategies": ["bm25", "splade", "dense"], "fusion": {"method": "rrf"}}
    pool = RawHttpPool(url)
    runner = LoadRunner(http_sender(pool), queries, body, args.timeout)
    samples: list = []
    started = time.perf_counter()
    try:
        # Slices of the open loop, so the run ends soon after the ingest does.
        while time.perf_counter() - started < args.duration and not log.ingest_done.is_set():
            part, _ = await runner.open_loop(args.rate, args.slice, 0.0)
            samples.extend(part)
    finally:
        await pool.close()
    return samples, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=str(ROOT / "config" / "local.yaml"))
    parser.add_argument("--folder", type=Path, default=PLOS)
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=180)
    parser.add_argument("--slice", type=float, default=10, help="seconds per open-loop slice")
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--queries", type=Path, default=SCIFACT)
    parser.add_argument("--check-p95-ms", type=float)
    parser.add_argument("--out", type=Path, default=RESULTS / "search_during_ingest")
    args = parser.parse_args(argv)

    config = yaml.safe_load(Path(args.config).read_text())
    workdir = Path(tempfile.mkdtemp(prefix="bench-search-ingest-"))
    config["data_dir"] = str(workdir / "data")
    config_path = workdir / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    port = free_port()
    command = [
        sys.executable, "-m", "deployments.cli", "--config", str(config_path),
        "serve", "--port", str(port), "--ingest", str(args.folder),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    log = ServiceLog(process)
    try:
        if not log.ready.wait(300):
            raise SystemExit("the service did not start within 300 s:\n" + "\n".join(log.lines))
        samples, window = asyncio.run(
            search_while_ingesting(
                f"http://127.0.0.1:{port}", args, log, load_queries(args.queries)
            )
        )
        files_done, files_total = log.files_done, log.files_total
    finally:
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
        stop_s = time.monotonic() - sent

    report = {
        "command": " ".join(command[2:]),
        "rate_qps": args.rate,
        "searches": summarise(samples, window, args.rate),
        "ingest": {
            "files_done": files_done,
            "files_total": files_total,
            "finished": log.ingest_done.is_set(),
            "window_s": round(window, 1),
        },
        "stop_after_sigint_s": round(stop_s, 1),
    }
    searches = report["searches"]
    timeouts = searches["errors"].get("TIMEOUT", 0)
    lines = [
        f"# Search at {args.rate:g} QPS during the start-up ingest ({args.folder.name})",
        "",
        f"Service: `serve-app {report['command']}`",
        "",
        "| searches | p50 ms | p95 ms | p99 ms | max ms | errors | 504s | files ingested meanwhile |",
        "|---|---|---|---|---|---|---|---|",
        f"| {searches['requests']} | {searches['p50_ms']} | {searches['p95_ms']} | "
        f"{searches['p99_ms']} | {searches['max_ms']} | {sum(searches['errors'].values())} | "
        f"{timeouts} | {files_done}/{files_total} in {window:.0f} s |",
        "",
        f"Stage medians (ms): {json.dumps(searches['stage_ms_median'])}",
        f"Stopped {report['stop_after_sigint_s']} s after SIGINT.",
    ]
    write_report(args.out, report, lines)
    if args.check_p95_ms is not None and not searches["p95_ms"] <= args.check_p95_ms:
        print(f"FAIL: p95 {searches['p95_ms']} ms > {args.check_p95_ms} ms", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
