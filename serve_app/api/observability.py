"""Request ids, structured JSON logs and Prometheus metrics for the HTTP API."""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time
import uuid
from typing import Any, Protocol, TextIO, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

T_co = TypeVar("T_co", covariant=True)

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
_VALID_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
INSTANCE_ENV = "SERVE_APP_INSTANCE_ID"
"""A local run's id (``deployments.local.instance``): every replica inherits it; ``/readyz``
says it."""
METRICS_URL_ENV = "SERVE_APP_METRICS_URL"
"""Where a local run's metrics are exported (Ray's metrics agent); ``/metrics`` serves them."""

ACCESS_FIELDS = (
    "method", "path", "route", "status", "code", "principal", "tenant", "client", "duration_ms",
)  # fmt: skip
"""The fields a log record may carry besides its message (the access line has them all)."""

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# Answers take seconds to minutes on a CPU.
ANSWER_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300)
# The outcome of a request whose client left before it was answered (HTTP 499, nginx's).
CLIENT_CLOSED_STATUS, CLIENT_CLOSED = 499, "CLIENT_CLOSED"


def request_id_from(header: str | None) -> str:
    """The client's X-Request-ID when it is sane (1-128 of ``A-Za-z0-9._:-``), else a fresh
    one: the id is echoed in headers and written in every log line of the request."""
    if header and _VALID_ID.fullmatch(header):
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
        for key in ACCESS_FIELDS:
            if hasattr(record, key):
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_json_logging(
    level: str = "INFO", access_log: bool = True, stream: TextIO | None = None
) -> None:
    """JSON lines on ``stream`` (default: stderr) for ``serve_app``'s loggers.
    ``access_log=False`` drops the per-request line where the server already writes one (Ray
    Serve's ingress access log carries the same request id, method, path, status and
    latency)."""
    from serve_app.api.log_stream import NonBlockingStreamHandler

    handler = NonBlockingStreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("serve_app")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    logging.getLogger("serve_app.access").disabled = not access_log


class CounterChild(Protocol):
    def inc(self, amount: float = 1.0) -> None: ...


class HistogramChild(Protocol):
    def observe(self, value: float) -> None: ...


class Labelled(Protocol[T_co]):
    def labels(self, *values: str) -> T_co: ...


class Instruments(Protocol):
    """Where the API's metrics are recorded: Prometheus' client in this process (served at
    ``/metrics``), or Ray's metrics in a Serve replica (aggregated by Ray and exported on
    each node's metrics port, ``deployments.replicas.metrics``)."""

    def counter(self, name: str, doc: str, labels: tuple[str, ...]) -> Labelled[CounterChild]: ...

    def histogram(
        self, name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]
    ) -> Labelled[HistogramChild]: ...

    def render(self) -> bytes | None:
        """The exposition text, or None where another process exports the metrics."""


class PrometheusInstruments:
    """prometheus_client metrics in a registry of their own (one per app instance)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()

    def counter(self, name: str, doc: str, labels: tuple[str, ...]) -> Counter:
        return Counter(name, doc, list(labels), registry=self.registry)

    def histogram(
        self, name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]
    ) -> Histogram:
        return Histogram(name, doc, list(labels), buckets=buckets, registry=self.registry)

    def render(self) -> bytes | None:
        return generate_latest(self.registry)


class Metrics:
    """The API's metrics, recorded through ``instruments`` (default: Prometheus' client)."""

    def __init__(self, instruments: Instruments | None = None) -> None:
        self.instruments = instruments or PrometheusInstruments()
        counter, histogram = self.instruments.counter, self.instruments.histogram
        self.requests = counter(
            "serve_app_requests", "HTTP requests", ("endpoint", "method", "status")
        )
        self.latency = histogram(
            "serve_app_request_latency_seconds",
            "HTTP request latency",
            ("endpoint",),
            LATENCY_BUCKETS,
        )
        self.stage_latency = histogram(
            "serve_app_stage_latency_seconds",
            "Latency of each pipeline stage (encode.*, retrieve.*, fusion, rerank, chunk, write)",
            ("operation", "stage"),
            LATENCY_BUCKETS,
        )
        self.errors = counter("serve_app_errors", "Error responses by code", ("code",))
        self.answers = counter(
            "serve_app_answers",
            "Answers by outcome (answered, irrelevant, no_results, an error code, "
            "CLIENT_CLOSED) and mode (stream, whole)",
            ("outcome", "mode"),
        )
        self.answer_checks = counter(
            "serve_app_answer_checks",
            "What the answers' checks found: valid and invalid citations, unsupported and "
            "uncited sentences, relevance-gate overrules, understanding that did not parse",
            ("kind",),
        )
        self.answer_latency = histogram(
            "serve_app_answer_seconds", "Answer latency, to its end", ("mode",), ANSWER_BUCKETS
        )
        self.first_token = histogram(
            "serve_app_answer_first_token_seconds",
            "Time to an answer's first generated text",
            ("mode",),
            ANSWER_BUCKETS,
        )
        self.batch_size = histogram(
            "serve_app_model_batch_size",
            "Items per model batch (reported by the model deployments)",
            ("model",),
            (1, 2, 4, 8, 16, 32, 64, 128, 256),
        )
        self.padding_ratio = histogram(
            "serve_app_model_padding_ratio",
            "Share of padded positions in a model batch",
            ("model",),
            (0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0),
        )
        self.batch_tokens = histogram(
            "serve_app_model_batch_tokens",
            "Real (unpadded) tokens per model batch; the budget caps padded tokens",
            ("model",),
            (16, 64, 256, 1024, 4096, 16384, 65536),
        )
        self.queue_seconds = histogram(
            "serve_app_model_queue_seconds",
            "Time a request waited in a model deployment's batch queue",
            ("model",),
            LATENCY_BUCKETS,
        )

    def observe_answer(
        self,
        outcome: str,
        streamed: bool,
        seconds: float,
        data: dict[str, Any],
        first_token_s: float | None = None,
    ) -> None:
        """One answer as its user saw it: ``outcome`` is ``answered``, an early return
        (``irrelevant``, ``no_results``), an error code or ``CLIENT_CLOSED``; ``data`` its
        metadata and done events' fields merged (``AnswerPipeline.collect``'s shape)."""
        mode = "stream" if streamed else "whole"
        self.answers.labels(outcome, mode).inc()
        self.answer_latency.labels(mode).observe(seconds)
        if first_token_s is not None:
            self.first_token.labels(mode).observe(first_token_s)
        checks = {
            "citation_valid": len(data.get("citations") or []),
            "citation_invalid": len(data.get("invalid_citations") or []),
            "sentence_unsupported": len(data.get("unsupported_sentences") or []),
            "sentence_uncited": len(data.get("uncited_sentences") or []),
        }
        understanding = data.get("understanding") or {}
        checks["understanding_invalid"] = int(understanding.get("valid") is False)
        checks["gate_overruled"] = int(
            bool((understanding.get("relevance_check") or {}).get("overruled"))
        )
        for kind, count in checks.items():
            if count:
                self.answer_checks.labels(kind).inc(count)

    def observe_streamed_error(self, code: str) -> None:
        """An error sent inside a stream whose 200 already went out: the HTTP layer counted
        a success, so the error is counted here."""
        self.errors.labels(code).inc()

    def observe_request(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, method, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def observe_stages(self, operation: str, timings_ms: dict[str, float]) -> None:
        for stage, ms in timings_ms.items():
            self.stage_latency.labels(operation, stage).observe(ms / 1000)

    def observe_batch(self, model: str, stats: dict[str, Any]) -> None:
        self.batch_size.labels(model).observe(stats.get("batch_size", 0))
        self.padding_ratio.labels(model).observe(stats.get("padding_ratio", 0.0))
        if "tokens" in stats:
            self.batch_tokens.labels(model).observe(stats["tokens"])
        self.queue_seconds.labels(model).observe(stats.get("queue_s", 0.0))

    def render(self) -> bytes | None:
        return self.instruments.render()


class Stopwatch:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.start
