"""Run the whole Serve application on this machine: Ray on CPU, HTTP on 127.0.0.1."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

from serve_app.config import AppConfig
from serve_app.loaders.base import iter_files

log = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_S = 4.0
"""How long Serve may take to drain before Ray and all its processes are stopped anyway."""
LEFTOVER_WAIT_S = 2.0
"""How long the processes Ray started may take to exit after ``ray.shutdown`` before a kill."""


def start(config: AppConfig, num_cpus: int | None = None) -> str:
    """Start Ray and the application; returns the base URL once every deployment is up."""
    from serve_app.api.auth import check_exposure

    check_exposure(config.api.auth, config.serve.host)  # before Ray: refuse an open API now
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # local only; a cluster keeps Ray's auth
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Ray Serve reads its switches when its processes start: they inherit this environment.
    for key, value in config.serve.env.items():
        os.environ.setdefault(key, value)
    chosen_ports: list[str] = []
    if os.environ.get("RAY_SERVE_ENABLE_HA_PROXY") == "1":
        # HAProxy's stats and Prometheus listeners have fixed default ports (8404, 9101) on
        # every interface; on one machine take free ones, so two runs (or tests) never collide.
        for key in ("RAY_SERVE_HAPROXY_STATS_PORT", "RAY_SERVE_HAPROXY_METRICS_PORT"):
            if key not in os.environ:
                os.environ[key] = str(_free_port())
                chosen_ports.append(key)
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
    for key in chosen_ports:  # Ray's processes have them; a run started from here picks anew
        os.environ.pop(key, None)
    serve.run(
        build_app_from_config(config),
        name=config.serve.app_name,
        route_prefix=config.serve.route_prefix,
        blocking=False,
    )
    return f"http://{config.serve.host}:{config.serve.port}"


def _free_port() -> int:
    """A free port outside the kernel's ephemeral range: HAProxy binds it on every interface
    a few seconds after it is chosen, and a port from the ephemeral range can be taken in
    between as the local end of any outgoing connection (seen in CI: "cannot bind socket
    (Address already in use)"). Ray's worker ports are 10002-19999 by default."""
    low, high = _ephemeral_range()
    candidates = [port for port in range(20000, 65536) if not low <= port <= high]
    for port in random.sample(candidates, 64):
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port for HAProxy's stats and metrics listeners")


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def stop(graceful_s: float = GRACEFUL_SHUTDOWN_S) -> None:
    """Serve's graceful shutdown, bounded by ``graceful_s``, then Ray and every process it
    started (replicas, proxies, GCS, raylet) whether or not Serve finished draining."""
    import ray

    # Collected before Ray stops: once the raylet is gone its agents are re-parented to init
    # and would poll for their parent for several seconds more (seen: the dashboard and
    # runtime-env agents alive 15 s after the stop).
    started_here = psutil.Process().children(recursive=True)
    if ray.is_initialized():
        _drain_serve(graceful_s)
    ray.shutdown()
    _, alive = psutil.wait_procs(started_here, timeout=LEFTOVER_WAIT_S)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            log.info("killing leftover process %s %s", process.pid, process.name())
            process.kill()


def _drain_serve(timeout_s: float) -> None:
    """Serve's graceful shutdown, bounded, in the calling thread.

    ``serve.shutdown()`` takes no timeout, and running it in a thread that is still inside
    Ray when ``ray.shutdown()`` runs makes Ray's core worker end the whole process with
    status 1 ("The core worker has already been shutdown"; seen in CI when the drain took
    longer than the bound). Serve's client takes a timeout for the controller's drain, so
    the same steps run here with the bound and nothing is left running inside Ray.
    """
    from ray.serve.context import _check_cached_client_alive, _disconnect

    try:
        client, _ = _check_cached_client_alive()  # bounded: 5 s for a dead controller
        if client is not None:
            client.shutdown(timeout_s=timeout_s)
    except Exception as error:  # Ray is stopped next, whatever happened here
        log.info("Serve shutdown cut short: %r", error)
    finally:
        _disconnect()


def ingest_folder(
    base_url: str,
    paths: list[str],
    batch_files: int = 4,
    timeout_s: float = 1000,
    stop_event: threading.Event | None = None,
) -> dict:
    """POST files as multipart batches; returns summed counts. Stops between batches once
    ``stop_event`` is set (a batch in flight ends when the service stops)."""
    stop_event = stop_event or threading.Event()
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
            if stop_event.is_set():
                break
            group = files[start_index : start_index + batch_files]
            parts = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in group]
            try:
                response = client.post("/v1/documents", files=parts)
            except httpx.HTTPError as error:
                response = None
                problem = f"{type(error).__name__}: {error}"
            if stop_event.is_set():
                break
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
                flush=True,
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


class _Stop(Exception):
    """Ctrl-C or SIGTERM: unwinds whatever the main thread is doing, start-up included."""


def serve_forever(config: AppConfig, ingest: list[str] | None = None) -> int:
    """Serve until Ctrl-C / SIGTERM, indexing ``ingest`` in the background once up.

    The first signal interrupts the main thread wherever it is (Ray starting, the app
    deploying, serving) and stops Serve and Ray within about ``GRACEFUL_SHUTDOWN_S`` plus
    Ray's own teardown; the start-up ingest stops with them. Later signals are ignored while
    that runs, so a second Ctrl-C cannot leave Ray's processes behind half-stopped.
    """
    stop_event = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stop_event.is_set():
            return
        stop_event.set()
        raise _Stop(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    started = time.perf_counter()
    try:
        url = start(config)
        print(
            f"serving on {url} (ready in {time.perf_counter() - started:.1f}s); Ctrl-C to stop",
            flush=True,
        )
        print_examples(url)
        if ingest:
            threading.Thread(
                target=_ingest_then_report,
                args=(url, ingest, stop_event),
                name="startup-ingest",
                daemon=True,
            ).start()
        stop_event.wait()
    except _Stop as received:
        print(f"{received}: stopping", flush=True)
    finally:
        stop_event.set()
        print("shutting down", flush=True)
        stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _ingest_then_report(url: str, paths: list[str], stop_event: threading.Event) -> None:
    totals = ingest_folder(url, paths, stop_event=stop_event)
    if stop_event.is_set():
        return
    print(
        f"ingested {totals['files']} files: {totals['written']} written, "
        f"{totals['unchanged']} unchanged, {totals['chunks_written']} chunks, "
        f"{totals['failed_files']} files failed",
        flush=True,
    )
    print_examples(url)


def existing(paths: list[str]) -> list[str]:
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise SystemExit(f"no such file or folder: {', '.join(missing)}")
    return paths
