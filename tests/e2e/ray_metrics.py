"""Reading the metrics the local Ray node exports (the app's metrics go through Ray's)."""

from __future__ import annotations

import time

import httpx


def ray_metrics(wanted: list[str], timeout_s: float = 60) -> list[str]:
    """The local Ray node's exported metrics once every name in ``wanted`` is there
    (replicas report to the node's agent every few seconds)."""
    import ray

    port = ray._private.worker.global_worker.node.metrics_export_port
    deadline, text = time.time() + timeout_s, ""
    while time.time() < deadline:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        if all(name in text for name in wanted):
            break
        time.sleep(2)
    return [line for line in text.splitlines() if not line.startswith("#")]


def metric_lines(lines: list[str], name: str, *labels: str) -> list[str]:
    """Samples of the Ray-exported metric ``name`` (Ray prefixes ``ray_``) with ``labels``."""
    return [
        line
        for line in lines
        if line.startswith(f"ray_{name}") and all(label in line for label in labels)
    ]
