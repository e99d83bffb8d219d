"""Run the whole Serve application on this machine: Ray on CPU, HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

import httpx
import psutil

from deployments.local.instance import (
    CLIENT_CONNECTIONS_ENV,
    HEADER_TIMEOUT_ENV,
    INSTANCE_ENV,
    SETUP_HOOK,
    TRUSTED_PROXIES_ENV,
    Instance,
    isolate,
)
from deployments.settings import HAPROXY_HOOK_ENV, service_config
from serve_app.api.observability import METRICS_URL_ENV
from serve_app.config import AppConfig
from serve_app.errors import ConfigError
from serve_app.loaders.base import iter_files
from serve_app.ports import free_port
from serve_app.stores.ownership import OWNER_URL_ENV

log = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_S = 4.0
"""How long Serve may take to drain before Ray and all its processes are stopped anyway."""
LEFTOVER_WAIT_S = 2.0
"""How long the processes Ray started may take to exit after ``ray.shutdown`` before a kill."""
STOP_BOUND_S = GRACEFUL_SHUTDOWN_S + 3.0
"""How long the local run's whole stop may take before Ray's processes are killed."""
_started: list[Instance] = []


def start(config: AppConfig, num_cpus: int | None = None) -> str:
    """Start Ray and the application; returns the base URL once every deployment is up."""
    config = service_config(config)
    instance = start_serve(config, num_cpus)
    import ray
    from ray import serve

    from deployments.builder.graph import build_app_from_config
    from deployments.builder.placement import check_fits

    check_fits(config, ray.cluster_resources())
    settings = config.serve
    serve.run(
        build_app_from_config(config),
        name=settings.app_name,
        route_prefix=settings.route_prefix,
        blocking=False,
    )
    url = f"http://{settings.host}:{settings.port}"
    wait_until_own_app_answers(url, instance.id)
    return url


def check_haproxy() -> None:
    """ConfigError unless Ray Serve can find the HAProxy binary its HAProxy ingress runs (the
    transport default). Without one Serve's proxy fails after Ray has started, with Ray's
    traceback; this says it before Ray starts, and names the switch that does without."""
    from ray.serve._private.haproxy import get_haproxy_binary

    try:
        get_haproxy_binary()
    except FileNotFoundError as error:
        raise ConfigError(
            "serve.env turns on Ray Serve's HAProxy ingress (RAY_SERVE_ENABLE_HA_PROXY=1, the "
            f"default), and Ray Serve says: {error} Or set "
            "serve.env.RAY_SERVE_ENABLE_HA_PROXY: '0' to serve through Ray Serve's Python "
            'proxy (slower: README, "Ray Serve deployments").'
        ) from None


def start_serve(config: AppConfig, num_cpus: int | None = None) -> Instance:
    """Start Ray and Serve (its proxies on ``serve:``'s host and port), no application.

    Serve's switches (``serve.env``) are set before this module imports Ray: Serve
    reads them once, when its constants are imported, in this process as in Ray's. Each
    replica also applies them to its own calls
    (``deployments.replicas.handles.serve_transport``), so a program that imported Ray Serve
    earlier still runs the configured transport."""
    from serve_app.api.auth import check_exposure

    settings = service_config(config).serve
    check_exposure(config.api.auth, settings.host)  # before Ray: refuse an open API now
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Ray Serve reads its switches when its processes start: they inherit this environment.
    for key, value in settings.env.items():
        os.environ.setdefault(key, value)
    # Before anything imports Ray: it reads them once.
    instance = isolate(settings.host, reserved={settings.port})
    _started.append(instance)  # its files go at stop(), whether or not the start succeeds
    if os.environ.get("RAY_SERVE_ENABLE_HA_PROXY") == "1":
        check_haproxy()
    url = f"http://{settings.host}:{settings.port}"
    os.environ.setdefault(OWNER_URL_ENV, url)  # named by the index's lock (stores.ownership)
    # HAProxy's header timeout (deployments.local.instance.bind_haproxy_admin_listeners)
    os.environ.setdefault(HEADER_TIMEOUT_ENV, str(config.api.connections.header_timeout_s))
    connections = config.api.connections
    os.environ.setdefault(CLIENT_CONNECTIONS_ENV, str(connections.max_connections_per_client))
    # HAProxy names each request's client (deployments.process_hook, client_rules), and the
    # edge logs that name.
    os.environ.setdefault(HAPROXY_HOOK_ENV, "1")
    os.environ.setdefault(TRUSTED_PROXIES_ENV, ",".join(config.api.trusted_proxies))
    metrics_port = free_port(avoid=instance.ports | {settings.port})
    os.environ.setdefault(METRICS_URL_ENV, f"http://127.0.0.1:{metrics_port}/metrics")
    import ray
    from ray import serve

    if not ray.is_initialized():
        ray.init(
            num_cpus=num_cpus or max(2, os.cpu_count() or 2),
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            runtime_env={"worker_process_setup_hook": SETUP_HOOK},
            _metrics_export_port=metrics_port,
        )
    serve.start(
        http_options={
            "host": settings.host,
            "port": settings.port,
            "keep_alive_timeout_s": connections.keep_alive_s,
        }
    )
    # Ray's processes have them; a run started from this process later chooses anew.
    for key in instance.environment:
        if key != INSTANCE_ENV:
            os.environ.pop(key, None)
    return instance


def wait_until_own_app_answers(url: str, instance_id: str, timeout_s: float = 60.0) -> None:
    """Return once ``/readyz`` at ``url`` answers ready from this run's own app (its instance
    id), not from whatever else answered on that address meanwhile."""
    deadline = time.monotonic() + timeout_s
    seen = "nothing"
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            try:
                answer = client.get(f"{url}/readyz")
                body = answer.json()
                if body.get("instance") == instance_id and body.get("ready"):
                    return
                seen = f"{answer.status_code} {body}"
            except (httpx.HTTPError, ValueError) as error:
                seen = f"{type(error).__name__}: {error}"
            time.sleep(0.2)
    raise ConfigError(
        f"{url}/readyz did not answer ready for this run (instance {instance_id}) within "
        f"{timeout_s:g} s; last answer: {seen}"
    )


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
    _kill_leftovers(started_here)
    while _started:
        _started.pop().remove_files()


def _kill_leftovers(processes: list[psutil.Process]) -> None:
    """Kill those of ``processes`` still running after ``LEFTOVER_WAIT_S``."""
    _, alive = psutil.wait_procs(processes, timeout=LEFTOVER_WAIT_S)
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
            started = time.monotonic()
            client.shutdown(timeout_s=timeout_s)  # logs a warning and returns at the bound
            took = time.monotonic() - started
            verdict = "drained in" if took < timeout_s else "cut short: its drain took over"
            print(f"Serve {verdict} {took:.1f} s", flush=True)
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
    """Upload the files, ``batch_files`` a request, through the service's client
    (``ServiceClient.upload_paths``: a 429 or 503 is waited out as its Retry-After says);
    returns summed counts. A refused batch is reported and the next one sent: the service
    stays up. Stops between batches once ``stop_event`` is set."""
    from serve_app.client import ApiCallError, ServiceClient

    stop_event = stop_event or threading.Event()
    files = list(iter_files(paths))
    sent = 0

    def report(group: list[Path], outcome: object) -> None:
        nonlocal sent
        sent += len(group)
        if isinstance(outcome, ApiCallError):
            print(f"  ingest of {[p.name for p in group]} failed: {outcome}", file=sys.stderr)
        else:
            print(f"  ingested {sent}/{len(files)} files", file=sys.stderr, flush=True)

    async def upload() -> dict:
        client = ServiceClient(base_url, timeout_s=timeout_s, request_prefix="ingest")
        try:
            totals = await client.upload_paths(
                files, batch_files=batch_files, keep_going=True, on_batch=report,
                stopped=stop_event.is_set,
            )  # fmt: skip
        finally:
            await client.close()
        return {
            "files": totals.files,
            "written": len(totals.written),
            "unchanged": len(totals.unchanged),
            "chunks_written": totals.chunks_written,
            "failed_files": totals.failed_files,
        }

    return asyncio.run(upload())


def print_examples(url: str) -> None:
    example = "how do bacteria resist antibiotics"
    print(
        f"open {url}/ in a browser: the playground (search, ask, upload)\n"
        "or try:\n"
        f"  curl -s '{url}/v1/search?q={example.replace(' ', '+')}&top_k=3'\n"
        f"  curl -s -X POST {url}/v1/search -H 'content-type: application/json' "
        f'-d \'{{"query": "{example}", "fusion": {{"method": "rrf"}}}}\'\n'
        f"  {url}/docs is the OpenAPI UI",
        flush=True,
    )


def serve_forever(config: AppConfig, ingest: list[str] | None = None) -> int:
    """Serve until Ctrl-C / SIGTERM, indexing ``ingest`` in the background once up.

    Ray is started, served and stopped by one thread of its own; the main thread only takes
    the signals and waits, so it sees a stop at once whatever Ray is doing. During start-up
    (Ray starting, the app deploying) every process Ray started is stopped directly and this
    process exits; once serving, Serve drains for at most ``GRACEFUL_SHUTDOWN_S`` and Ray
    stops, the start-up ingest with them, and a teardown longer than ``STOP_BOUND_S`` is cut
    short the same way. Later signals are ignored while that runs.

    Why not raise from the handler into the main thread: the exception lands inside Ray's
    calls (``ray.init``'s own SIGTERM handler exits that way too). Seen: in CI a SIGTERM
    during ``ray.init`` left the run alive past 60 s; here one during ``serve.start``
    surfaced 20 s later as a ``SystemError`` from a ``ray.get``. Why one thread for start and
    stop: ``ray.shutdown`` takes 15 s when the thread that ran ``ray.init`` has ended
    (against 1 s from the same thread, measured with Ray 2.60).
    """
    stop_event = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        if not stop_event.is_set():
            received.append(signal.Signals(signum).name)
            stop_event.set()

    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, on_signal) for sig in signals}
    began = time.perf_counter()
    ray_thread = _RayThread(config, stop_event)
    while not ray_thread.ready.wait(0.1):
        if stop_event.is_set():
            print(f"{received[0]}: stopping during start-up", flush=True)
            _abandon("shutting down")
    # Ray's core worker puts a C-level SIGTERM handler of its own over Python's: take it back.
    for sig in signals:
        signal.signal(sig, on_signal)
    try:
        if ray_thread.error is None:
            url = ray_thread.url
            print(
                f"serving on {url} (ready in {time.perf_counter() - began:.1f}s); Ctrl-C to stop",
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
            print(f"{received[0]}: stopping", flush=True)
    finally:
        stop_event.set()
        print("shutting down", flush=True)
        ray_thread.join(STOP_BOUND_S)
        if ray_thread.is_alive():
            _abandon(f"Ray did not stop within {STOP_BOUND_S:g} s: its processes are killed")
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if ray_thread.error is not None:
        raise ray_thread.error
    return 0


class _RayThread(threading.Thread):
    """Starts Ray and the app (``url`` or ``error`` once ``ready``), then, once ``stop_event``
    is set (at once after a failed start), stops them: Ray is only ever called from here."""

    def __init__(self, config: AppConfig, stop_event: threading.Event) -> None:
        super().__init__(name="ray", daemon=True)
        self.ready = threading.Event()
        self.url = ""
        self.error: BaseException | None = None
        self._config = config
        self._stop_event = stop_event
        self.start()

    def run(self) -> None:
        # ray.init warns that it leaves SIGTERM alone outside the main thread: wanted here.
        logging.getLogger("ray._private.worker").addFilter(_NotMainThreadWarning())
        try:
            self.url = start(self._config)
        except BaseException as error:  # handed to the main thread
            self.error = error
        finally:
            self.ready.set()
        if self.error is None:
            self._stop_event.wait()
        stop()


class _NotMainThreadWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "not the main thread" not in record.getMessage()


def _abandon(message: str) -> NoReturn:
    """Stop every process Ray started and exit, without Ray's teardown: the Ray thread is
    inside Ray and cannot be unwound, and ``ray.shutdown`` beside it ends the process from
    Ray's core worker. Nothing of the service is open in this process: the stores live in
    the replicas, which are stopped like Ray's other processes."""
    print(message, flush=True)
    # Ray's threads in this process see their cluster go away; the process ends anyway.
    threading.excepthook = lambda _args: None
    started_here = psutil.Process().children(recursive=True)
    for process in started_here:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    _kill_leftovers(started_here)
    for process in psutil.Process().children(recursive=True):  # started meanwhile
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    for instance in _started:
        instance.remove_files()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown: Ray's atexit hooks would wait on the dead cluster


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
