"""Search while the service indexes at full speed: the `make run` path, measured.

    python -m benchmarks search-during-ingest [--rate 2] [--duration 180] [--folder DIR]
        [--config config/local.yaml] [--out STEM]

Starts ``serve-app --config CONFIG serve --ingest FOLDER`` (what `make run` runs, on a free
127.0.0.1 port and a fresh data directory; by default the 122 PLOS starter articles), waits
until it serves, then sends searches as an open loop at ``--rate`` queries per second
(SciFact test claims; three strategies, RRF) while the start-up ingest runs, for
``--duration`` seconds or until the ingest finishes. Reports search latency (from each
request's due time), errors by code (504 = TIMEOUT) and how far the ingest got; then stops
the service with SIGINT, times that, and lists the processes of its tree still alive
``--stop-within`` seconds later.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import yaml

from benchmarks.rawhttp import RawHttpPool
from benchmarks.report import default_stem, table, write_report
from benchmarks.runner import LoadRunner, Sample, http_sender, load_queries, search_body, summarise
from benchmarks.service import (
    add_run_arguments,
    config_data,
    fresh_workdir,
    starter_corpus,
)

PROGRESS = re.compile(r"ingested (\d+)/(\d+) files")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, "--queries")
    parser.add_argument("--folder", type=Path, help="default: the PLOS starter articles")
    parser.add_argument("--rate", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=180)
    parser.add_argument("--slice", type=float, default=10, help="seconds per open-loop slice")
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--stop-within", type=float, default=15)


@dataclass
class LocalService:
    """A ``serve-app serve`` process: its URL, its output as read so far, and how it stopped."""

    url: str
    command: list[str]
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    ingest_done: threading.Event = field(default_factory=threading.Event)
    files: tuple[int, int] = (0, 0)
    stopped: dict = field(default_factory=dict)

    def read(self, process: subprocess.Popen) -> None:
        for raw in process.stdout:  # type: ignore[union-attr]
            line = raw.rstrip()
            self.lines.append(line)
            if "serving on" in line:
                self.ready.set()
            if match := PROGRESS.search(line):
                self.files = (int(match[1]), int(match[2]))
            if line.startswith("ingested ") and "files:" in line:
                self.ingest_done.set()


def alive(processes: list[psutil.Process]) -> list[str]:
    found = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{process.pid} {' '.join(process.cmdline())[:100]}")
    return found


@contextlib.contextmanager
def local_service(
    config: Path, serve_args: list[str], stop_within: float
) -> Iterator[LocalService]:
    """``serve-app --config CONFIG serve SERVE_ARGS`` as `make run` starts it, on a free
    loopback port and a fresh data directory; ready when yielded, stopped with SIGINT after
    (``stopped``: seconds to exit, and its processes left ``stop_within`` seconds later)."""
    from serve_app.ports import free_port

    workdir = fresh_workdir("local-service")
    (workdir / "config.yaml").write_text(
        yaml.safe_dump({**config_data(config), "data_dir": str(workdir / "data")})
    )
    port = free_port()
    command = [sys.executable, "-m", "deployments.cli", "--config", str(workdir / "config.yaml")]
    command += ["serve", "--port", str(port), *serve_args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    service = LocalService(f"http://127.0.0.1:{port}", command)
    threading.Thread(target=service.read, args=(process,), daemon=True).start()
    try:
        if not service.ready.wait(300):
            raise SystemExit("the service did not start in 300 s:\n" + "\n".join(service.lines))
        yield service
    finally:
        tree = psutil.Process(process.pid).children(recursive=True)
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
        service.stopped["after_sigint_s"] = round(time.monotonic() - sent, 1)
        while alive(tree) and time.monotonic() - sent < stop_within:
            time.sleep(0.2)
        service.stopped.update(processes_in_tree=len(tree), left=alive(tree))
        for leftover in tree:  # never leak a Ray cluster into whatever runs next
            with contextlib.suppress(psutil.NoSuchProcess):
                leftover.kill()


async def search_while_ingesting(service: LocalService, args: argparse.Namespace) -> dict:
    pool = RawHttpPool(service.url)
    runner = LoadRunner(http_sender(pool), load_queries(args.queries), search_body(), args.timeout)
    samples: list[Sample] = []
    started = time.perf_counter()
    try:
        # Slices of the open loop, so the run ends soon after the ingest does.
        while time.perf_counter() - started < args.duration and not service.ingest_done.is_set():
            samples += (await runner.open_loop(args.rate, args.slice, 0.0))[0]
    finally:
        await pool.close()
    window = time.perf_counter() - started
    files = dict(zip(("files_done", "files_total"), service.files, strict=True))
    ingest = {**files, "finished": service.ingest_done.is_set(), "window_s": round(window, 1)}
    return {"searches": summarise(samples, window, args.rate), "ingest": ingest}


def run(args: argparse.Namespace) -> int:
    folder = args.folder or starter_corpus()
    with local_service(args.config, ["--ingest", str(folder)], args.stop_within) as service:
        report = asyncio.run(search_while_ingesting(service, args))
    report.update(command=" ".join(service.command[3:]), rate_qps=args.rate, stop=service.stopped)
    s, ingest = report["searches"], report["ingest"]
    columns = ("requests", "p50_ms", "p95_ms", "p99_ms", "max_ms", "errors")
    files = f"{ingest['files_done']}/{ingest['files_total']} in {ingest['window_s']} s"
    stop = service.stopped
    write_report(args.out or default_stem("search-during-ingest"), report, [
        f"# Search at {args.rate:g} QPS during the start-up ingest ({folder.name})", "",
        f"Service: `serve-app {report['command']}`", "",
        *table([*columns, "files ingested meanwhile"], [[*(s[c] for c in columns), files]]), "",
        f"Stage medians (ms): {json.dumps(s['stage_ms_median'])}",
        f"Stopped {stop['after_sigint_s']} s after SIGINT; processes of its tree left: "
        f"{len(stop['left'])} of {stop['processes_in_tree']}.",
    ])  # fmt: skip
    return 0
