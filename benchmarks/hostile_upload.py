"""A pathological upload against the running local service: does anyone else notice?

    python benchmarks/hostile_upload.py [--heading-kb 100] [--uploads 3] [--rate 4]
        [--duration 20] [--docs 200] [--config config/local.yaml]
        [--out benchmarks/results/hostile_upload]

Starts ``serve-app --config CONFIG serve`` (the ``make run`` path, a free 127.0.0.1 port, a
fresh data directory), indexes ``--docs`` SciFact abstracts over HTTP, then sends searches as an
open loop at ``--rate`` QPS for ``--duration`` seconds while ``--uploads`` multipart uploads of a
Markdown file whose heading line is ``# a`` + ``--heading-kb`` KB of blanks + ``x#`` go in, one
after another (the input that made the old regex loader backtrack for minutes inside the
ingress). Reports each upload's status and latency, search latency (P50/P95/P99 from each
request's due time) and errors, then stops the service with SIGINT and lists every process of
its tree still alive ``--stop-within`` seconds later.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psutil  # noqa: E402
import yaml  # noqa: E402

from benchmarks.load import LoadRunner, http_sender, load_queries, summarise  # noqa: E402
from benchmarks.rawhttp import RawHttpPool  # noqa: E402
from benchmarks.reports import write_report  # noqa: E402
from benchmarks.search_during_ingest import ServiceLog  # noqa: E402
from serve_app.ports import free_port  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"


def pathological_markdown(heading_kb: int) -> bytes:
    heading = "# a" + " " * (heading_kb * 1000) + "x#"
    return f"{heading}\n\nSome text under the heading about bacterial genomes.\n".encode()


def scifact_documents(folder: Path, count: int) -> list[dict]:
    documents = []
    with (folder / "corpus.jsonl").open() as corpus:
        for line in corpus:
            row = json.loads(line)
            documents.append(
                {"id": f"scifact-{row['_id']}", "title": row["title"], "text": row["text"]}
            )
            if len(documents) == count:
                break
    return documents


async def index(url: str, documents: list[dict], batch: int = 50) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
        for start in range(0, len(documents), batch):
            response = await http.post(
                "/v1/documents", json={"documents": documents[start : start + batch]}
            )
            response.raise_for_status()


async def uploads_during_searches(url: str, args: argparse.Namespace) -> dict:
    body = {"top_k": 10, "strategies": ["bm25", "splade", "dense"], "fusion": {"method": "rrf"}}
    pool = RawHttpPool(url)
    runner = LoadRunner(http_sender(pool), load_queries(args.queries), body, args.timeout)
    payload = pathological_markdown(args.heading_kb)
    uploads: list[dict] = []

    async def upload_loop() -> None:
        await asyncio.sleep(args.first_upload_after)
        async with httpx.AsyncClient(base_url=url, timeout=args.timeout) as http:
            for n in range(args.uploads):
                started = time.perf_counter()
                response = await http.post(
                    "/v1/documents",
                    files={"files": (f"heading-{n}.md", payload, "text/markdown")},
                )
                uploads.append(
                    {
                        "file": f"heading-{n}.md",
                        "bytes": len(payload),
                        "status": response.status_code,
                        "seconds": round(time.perf_counter() - started, 3),
                        "answer": response.text[:200],
                    }
                )

    try:
        started = time.perf_counter()
        (samples, _), _ = await asyncio.gather(
            runner.open_loop(args.rate, args.duration, 0.0), upload_loop()
        )
        window = time.perf_counter() - started
    finally:
        await pool.close()
    return {"uploads": uploads, "searches": summarise(samples, window, args.rate)}


def alive(processes: list[psutil.Process]) -> list[str]:
    found = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{process.pid} {' '.join(process.cmdline())[:100]}")
        except psutil.NoSuchProcess:
            continue
    return found


def run(args: argparse.Namespace) -> dict:
    config = yaml.safe_load(Path(args.config).read_text())
    workdir = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    config["data_dir"] = str(workdir / "data")
    config_path = workdir / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    port = free_port()
    command = [
        sys.executable, "-m", "deployments.cli", "--config", str(config_path),
        "serve", "--port", str(port),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    log = ServiceLog(process)
    url = f"http://127.0.0.1:{port}"
    tree: list[psutil.Process] = []
    try:
        if not log.ready.wait(300):
            raise SystemExit("the service did not start within 300 s:\n" + "\n".join(log.lines))
        asyncio.run(index(url, scifact_documents(args.queries, args.docs)))
        measured = asyncio.run(uploads_during_searches(url, args))
        tree = psutil.Process(process.pid).children(recursive=True)
    finally:
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
        exited_s = time.monotonic() - sent
        while alive(tree) and time.monotonic() - sent < args.stop_within:
            time.sleep(0.2)
        left = alive(tree)
        for leftover in tree:  # never leak a Ray cluster into whatever runs next
            with contextlib.suppress(psutil.NoSuchProcess):
                leftover.kill()
    return {
        "command": " ".join(command[3:]),
        "heading_kb": args.heading_kb,
        "rate_qps": args.rate,
        **measured,
        "processes_in_tree": len(tree),
        "exit_after_sigint_s": round(exited_s, 1),
        "left_after_stop": left,
    }


def markdown(report: dict) -> str:
    searches = report["searches"]
    lines = [
        f"# {report['heading_kb']} KB pathological Markdown heading uploads during searches at "
        f"{report['rate_qps']:g} QPS",
        "",
        f"Service: `serve-app {report['command']}`",
        "",
        "| upload | bytes | status | seconds |",
        "|---|---|---|---|",
        *(
            f"| {u['file']} | {u['bytes']} | {u['status']} | {u['seconds']} |"
            for u in report["uploads"]
        ),
        "",
        "| searches | p50 ms | p95 ms | p99 ms | max ms | errors |",
        "|---|---|---|---|---|---|",
        f"| {searches['requests']} | {searches['p50_ms']} | {searches['p95_ms']} | "
        f"{searches['p99_ms']} | {searches['max_ms']} | {json.dumps(searches['errors'])} |",
        "",
        f"Exited {report['exit_after_sigint_s']} s after SIGINT; processes of its tree left "
        f"running: {len(report['left_after_stop'])} of {report['processes_in_tree']}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=str(ROOT / "config" / "local.yaml"))
    parser.add_argument("--heading-kb", type=int, default=100)
    parser.add_argument("--uploads", type=int, default=3)
    parser.add_argument("--first-upload-after", type=float, default=2.0)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--stop-within", type=float, default=15)
    parser.add_argument("--queries", type=Path, default=SCIFACT)
    parser.add_argument("--out", type=Path, default=RESULTS / "hostile_upload")
    args = parser.parse_args(argv)

    report = run(args)
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
