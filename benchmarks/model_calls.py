"""How many queries share one model call: the ingress's own metrics, read from Ray.

Concurrent searches of an ingress replica coalesce into one call per model deployment: the
fewer calls, the less of Serve's per-call cost (gRPC, the request path, a thread hand-off) a
query pays. The ingress counts each call in ``serve_app_model_batch_size`` and each search in
``serve_app_requests``; under Ray Serve they reach Prometheus through Ray's metrics agent,
exported every ``metrics_report_interval_ms`` (10 s by default), so a reading waits for that.
Ray rebuilds a histogram's sum from bucket midpoints (a call of 1 reads as 0.5), so the sum
is not used: queries per call are the successful searches over the calls (a search calls
each encoder once), and the exact bucket counts give the calls by size.
"""

from __future__ import annotations

import re
from typing import Any

BATCH_METRIC = "serve_app_model_batch_size"
REQUESTS_METRIC = "serve_app_requests"
SEARCH_ENDPOINT = "/v1/search"
_LABEL = re.compile(r'(\w+)="([^"]*)"')

Reading = dict[str, Any]
"""``{"searches": n, "models": {model: {"calls": n, "buckets": {upper bound: n}}}}``."""


def read_totals(prometheus_text: str) -> Reading:
    """Successful searches and each model's calls (in all and per cumulative size bucket) so
    far, every series summed (replicas, and any prefix an exporter adds, such as Ray's
    ``ray_``)."""
    reading: Reading = {"searches": 0.0, "models": {}}
    for line in prometheus_text.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        name, _, rest = line.partition("{")
        label_text, _, value_text = rest.rpartition("}")
        labels = dict(_LABEL.findall(label_text))
        value = float(value_text.split()[0])
        if name.endswith((REQUESTS_METRIC, REQUESTS_METRIC + "_total")):
            if labels.get("endpoint") == SEARCH_ENDPOINT and labels.get("status") == "200":
                reading["searches"] += value
            continue
        if "model" not in labels:
            continue
        model = reading["models"].setdefault(labels["model"], {"calls": 0.0, "buckets": {}})
        if name.endswith(BATCH_METRIC + "_count"):
            model["calls"] += value
        elif name.endswith(BATCH_METRIC + "_bucket") and "le" in labels:
            bound = float(labels["le"])
            model["buckets"][bound] = model["buckets"].get(bound, 0.0) + value
    return reading


def per_call(before: Reading, after: Reading) -> dict[str, dict[str, Any]]:
    """Between two readings: each model's calls, the searches per call, and the calls by
    the size of the model batch that ran them (``"3-4": n``; a call's own size, or more where
    the replica's queue joined calls, of several ingress replicas say, into one batch)."""
    searches = after["searches"] - before["searches"]
    out: dict[str, dict[str, Any]] = {}
    for name, end in sorted(after["models"].items()):
        start = before["models"].get(name, {"calls": 0.0, "buckets": {}})
        calls = end["calls"] - start["calls"]
        if calls <= 0:
            continue
        by_size: dict[str, int] = {}
        below, previous = 0.0, 0
        for bound in sorted(end["buckets"]):
            cumulative = end["buckets"][bound] - start["buckets"].get(bound, 0.0)
            if cumulative > below:
                by_size[_size_label(previous, bound)] = int(cumulative - below)
            below = cumulative
            if bound != float("inf"):
                previous = int(bound)
        out[name] = {
            "calls": int(calls),
            "queries_per_call": round(searches / calls, 2),
            "calls_by_size": by_size,
        }
    return out


def _size_label(previous: int, bound: float) -> str:
    """The batch sizes a bucket holds beyond the one below it: "1", "3-4", ">256"."""
    if bound == float("inf"):
        return f">{previous}"
    if int(bound) == previous + 1:
        return str(int(bound))
    return f"{previous + 1}-{int(bound)}"


def ray_metrics_text(timeout_s: float = 10.0) -> str:
    """The Prometheus text of this Ray cluster's metrics agent (the head node; the caller
    is a Ray driver)."""
    import httpx
    import ray

    node = next(n for n in ray.nodes() if n.get("Alive"))
    url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
    response = httpx.get(url, timeout=timeout_s)
    response.raise_for_status()
    return response.text


def current_reading() -> Reading:
    """``read_totals`` of this Ray cluster's metrics, now (the caller is a Ray driver)."""
    return read_totals(ray_metrics_text())


def export_wait_s() -> float:
    """How long after the last call a reading is sure to include it: one export interval
    of Ray's metrics, plus a margin for the agent."""
    import ray

    return ray._config.metrics_report_interval_ms() / 1000 + 1.5
