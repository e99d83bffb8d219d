"""Run the whole Serve application on this machine: Ray on CPU, HTTP on 127.0.0.1."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import httpx

from serve_app.config import AppConfig
from serve_app.loaders.base import iter_files

log = logging.getLogger(__name__)


def start(config: AppConfig, num_cpus: int | None = None) -> str:
    """Start Ray and the application; returns the base URL once every deployment is up."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # local only; a cluster keeps Ray's auth
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ray
    from ray import serve

    from deployments.app import build_app_from_config

    if not ray.is_initialized():
        ray.init(
            num_cpus=num_cpus or max(2, os.cpu_count() or 2),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    serve.start(http_options={"host": config.serve.host, "port": config.serve.port})
    serve.run(
        build_app_from_config(config),
        name=config.serve.app_name,
        route_prefix=config.serve.route_prefix,
        blocking=False,
    )
    return f"http://{config.serve.host}:{config.serve.port}"


def stop() -> None:
    import ray
    from ray import serve

    try:
        serve.shutdown()
    finally:
        ray.shutdown()


def ingest_folder(
    base_url: str, paths: list[str], batch_files: int = 4, timeout_s: float = 1000
) -> dict:
    """POST files as multipart batches; returns summed counts."""
    files = list(iter_files(paths))
    totals = {
        "files": len(files),
        "written": 0,
        "unchanged": 0,
        "chunks_written": 0,
        "failed_files": 0,
    }
    with httpx.Client(base_url=base_url, timeout=timeout_s) as client:
        for start_index in range(0, len(files), batch_files):
            group = files[start_index : start_index + batch_files]
            parts = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in group]
            try:
                response = client.post("/v1/documents", files=parts)
            except httpx.HTTPError as error:
                response = None
                problem = f"{type(error).__name__}: {error}"
            if response is None or response.status_code != 200:
                # The service stays up: report the batch and go on with the next one.
                problem = problem if response is None else response.text
                print(f"  ingest of {[p.name for p in group]} failed: {problem}", file=sys.stderr)
                totals["failed_files"] += len(group)
                continue
            body = response.json()
            totals["written"] += len(body["written"])
            totals["unchanged"] += len(body["unchanged"])
            totals["chunks_written"] += body["chunks_written"]
            print(
                f"  ingested {min(start_index + batch_files, len(files))}/{len(files)} files",
                file=sys.stderr,
            )
    return totals


def print_examples(url: str) -> None:
    example = "how do bacteria resist antibiotics"
    print(
        "try:\n"
        f"  curl -s '{url}/v1/search?q={example.replace(' ', '+')}&top_k=3'\n"
        f"  curl -s -X POST {url}/v1/search -H 'content-type: application/json' "
        f'-d \'{{"query": "{example}", "fusion": {{"method": "rrf"}}}}\'\n'
        f"  {url}/docs is the OpenAPI UI",
        flush=True,
    )


def serve_forever(config: AppConfig, ingest: list[str] | None = None) -> int:
    started = time.perf_counter()
    url = start(config)
    print(
        f"serving on {url} (ready in {time.perf_counter() - started:.1f}s); Ctrl-C to stop",
        flush=True,
    )
    stop_event = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop_event.set())
    try:
        print_examples(url)
        if ingest:
            totals = ingest_folder(url, ingest)
            print(
                f"ingested {totals['files']} files: {totals['written']} written, "
                f"{totals['unchanged']} unchanged, {totals['chunks_written']} chunks, "
                f"{totals['failed_files']} files failed",
                flush=True,
            )
            print_examples(url)
        stop_event.wait()
    finally:
        print("shutting down", flush=True)
        stop()
    return 0


def existing(paths: list[str]) -> list[str]:
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise SystemExit(f"no such file or folder: {', '.join(missing)}")
    return paths
