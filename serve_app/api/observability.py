"""Request ids, structured JSON logs and Prometheus metrics for the HTTP API."""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
import uuid

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
_VALID_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def request_id_from(header: str | None) -> str:
    """The client's X-Request-ID when it is sane, else a fresh one."""
    if header and _VALID_ID.match(header):
        return header
    return uuid.uuid4().hex


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the current request id."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or REQUEST_ID.get(),
        }
        for key in ("method", "path", "status", "duration_ms", "tenant", "code"):
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_json_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("serve_app")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


class Metrics:
    """The API's Prometheus metrics, in a registry of their own (one per app instance)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "serve_app_requests",
            "HTTP requests",
            ["endpoint", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "serve_app_request_latency_seconds",
            "HTTP request latency",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.stage_latency = Histogram(
            "serve_app_stage_latency_seconds",
            "Latency of each pipeline stage (encode.*, retrieve.*, fusion, rerank, chunk, write)",
            ["operation", "stage"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.errors = Counter(
            "serve_app_errors", "Error responses by code", ["code"], registry=self.registry
        )
        self.batch_size = Histogram(
            "serve_app_model_batch_size",
            "Items per model batch (reported by the model deployments)",
            ["model"],
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=self.registry,
        )
        self.padding_ratio = Histogram(
            "serve_app_model_padding_ratio",
            "Share of padded positions in a model batch",
            ["model"],
            buckets=(0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0),
            registry=self.registry,
        )
        self.batch_tokens = Histogram(
            "serve_app_model_batch_tokens",
            "Real (unpadded) tokens per model batch; the budget caps padded tokens",
            ["model"],
            buckets=(16, 64, 256, 1024, 4096, 16384, 65536),
            registry=self.registry,
        )
        self.queue_seconds = Histogram(
            "serve_app_model_queue_seconds",
            "Time a request waited in a model deployment's batch queue",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def observe_request(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, method, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def observe_stages(self, operation: str, timings_ms: dict[str, float]) -> None:
        for stage, ms in timings_ms.items():
            self.stage_latency.labels(operation, stage).observe(ms / 1000)

    def observe_batch(self, model: str, stats: dict) -> None:
        self.batch_size.labels(model).observe(stats.get("batch_size", 0))
        self.padding_ratio.labels(model).observe(stats.get("padding_ratio", 0.0))
        if "tokens" in stats:
            self.batch_tokens.labels(model).observe(stats["tokens"])
        self.queue_seconds.labels(model).observe(stats.get("queue_s", 0.0))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class Stopwatch:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.start
