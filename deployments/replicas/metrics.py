"""The API's metrics through Ray's metrics, for the ingress replicas.

A replica's own Prometheus registry would show one replica's counts at a time behind a load
balancer. Ray's metrics (``ray.serve.metrics``) are sent by every replica to its node's
metrics agent and exported on the node's metrics port (8080 in the chart), tagged with the
deployment and replica: Prometheus scrapes every node (the chart's PodMonitor) and sums.
"""

from __future__ import annotations

from typing import Any

from ray.serve import metrics as serve_metrics


class _Child:
    """One label combination of a Ray metric (the tags dict built once, then reused)."""

    __slots__ = ("_metric", "_tags")

    def __init__(self, metric: Any, tags: dict[str, str]) -> None:
        self._metric = metric
        self._tags = tags

    def inc(self, amount: float = 1.0) -> None:
        self._metric.inc(amount, tags=self._tags)

    def observe(self, value: float) -> None:
        self._metric.observe(value, tags=self._tags)


class _Labelled:
    def __init__(self, metric: Any, keys: tuple[str, ...]) -> None:
        self._metric = metric
        self._keys = keys
        self._children: dict[tuple[str, ...], _Child] = {}

    def labels(self, *values: str) -> _Child:
        child = self._children.get(values)
        if child is None:
            tags = dict(zip(self._keys, (str(v) for v in values), strict=True))
            child = self._children[values] = _Child(self._metric, tags)
        return child


class RayInstruments:
    """``serve_app.api.observability.Instruments`` over ``ray.serve.metrics``."""

    def counter(self, name: str, doc: str, labels: tuple[str, ...]) -> _Labelled:
        return _Labelled(serve_metrics.Counter(name, description=doc, tag_keys=labels), labels)

    def histogram(
        self, name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]
    ) -> _Labelled:
        metric = serve_metrics.Histogram(
            name, description=doc, boundaries=[float(b) for b in buckets], tag_keys=labels
        )
        return _Labelled(metric, labels)

    def render(self) -> None:
        return None  # exported by Ray on each node's metrics port, not by this replica
