"""The ``serve:`` section: what the Ray Serve layer owns (the HTTP bind, each deployment's
replicas, resources and drain, Ray Serve's transport switches), and the rules that tie it to
the library's configuration. ``serve_app`` carries the section unread; ``serve_settings``
validates it."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from serve_app.config import AppConfig, Section, is_loopback
from serve_app.errors import ConfigError

log = logging.getLogger(__name__)


class AutoscalingSettings(Section):
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=1, ge=1)
    target_ongoing_requests: float = Field(default=2.0, gt=0)
    upscale_delay_s: float = Field(default=30.0, ge=0)
    downscale_delay_s: float = Field(default=600.0, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> AutoscalingSettings:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must not exceed max_replicas")
        return self


RETIRED_BATCHING = {"max_batch_size", "batch_wait_timeout_s"}


class BatchingSettings(Section):
    """How concurrent calls share one call (natural batching, ``serve_app/batching.py``): an
    idle caller sends at once, a busy one sends what arrived during its previous call."""

    # Calls kept running at once towards one deployment: with one replica, one batch runs
    # while the next gathers; more replicas each take one (the replica's queue re-batches).
    calls_in_flight: int = Field(default=2, ge=1)
    query_batch: int = Field(default=64, ge=1)  # queries an ingress sends an encoder at once
    rerank_batch: int = Field(default=16, ge=1)  # rerank requests in one reranker call
    retrieve_batch: int = Field(default=64, ge=1)  # queries in one call to the store
    # The store replica merges the calls of every ingress replica: at most this many a batch
    # (a batch of the embedded engine runs inline, so its size bounds how long the replica's
    # loop is held; a query alone costs 1.3-1.6x its share of a batch of 4:
    # ``benchmarks/dev/store_retrieve.py``).
    store_merged_calls: int = Field(default=4, ge=1)
    # Merged batches a store replica runs at once; unset: 1 for the embedded engine (inline),
    # 4 for a server store (round trips overlap).
    store_batches_in_flight: int | None = Field(default=None, ge=1)


class DeploymentSettings(Section):
    """Resources and replicas of one Ray Serve deployment (batching is the model queue's:
    ``dense.queue``, ``splade.queue``, ``reranker.queue``)."""

    num_replicas: int = Field(default=1, ge=1)
    autoscaling: AutoscalingSettings | None = None
    num_cpus: float = Field(default=0.5, ge=0)
    num_gpus: float = Field(default=0.0, ge=0)
    accelerator_type: str | None = None
    memory_bytes: int | None = Field(default=None, ge=0)
    # Custom Ray resources, e.g. {"dense_slot": 1} to pin a deployment to its worker group.
    resources: dict[str, float] = Field(default_factory=dict)
    max_ongoing_requests: int = Field(default=16, ge=1)
    # Serve's per-call access log line. Off for the internal deployments: each search makes
    # several internal calls, and their lines cost CPU in every replica on the hot path (the
    # ingress logs the client's request, with its request id, status and latency). Unset:
    # on for the ingress, off for the others.
    access_log: bool | None = None
    # Serve's drain when a replica stops (shutdown, scale-down, upgrade): how often it checks
    # for requests still running, and how long before the replica is killed. Unset: Serve's
    # defaults (every 2 s, 20 s), right for a cluster behind a load balancer. Serve stops the
    # deployments one after the other in dependency order, so on one machine the 2 s checks
    # alone made Ctrl-C's drain outlast the local run's stop bound.
    graceful_shutdown_wait_loop_s: float | None = Field(default=None, gt=0)
    graceful_shutdown_timeout_s: float | None = Field(default=None, gt=0)


# Ray Serve's switches for the transport this service is measured on (README, "Serving
# path"): HAProxy in front of the ingress replicas, gRPC between replicas, user code on the
# replica's main loop. Serve's own defaults (its Python proxy, Ray actor calls) cost several
# CPU milliseconds a query more, so a configuration that names no transport gets this one;
# a key it sets wins (RAY_SERVE_THROUGHPUT_OPTIMIZED: "0" and RAY_SERVE_ENABLE_HA_PROXY: "0"
# go back to Serve's defaults).
SERVE_TRANSPORT_ENV = {
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    # gRPC's default 4 MB message cap (kept by Ray) failed a 4.5 MB document inside the
    # ingress; messages between replicas are bounded by the API's own limits, as over Ray's
    # actor calls, so this is gRPC's own ceiling (2 GiB - 1).
    "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH": "2147483647",
}


# Serve's HTTP servers (its proxy, each ingress replica's direct-ingress server) run the edge
# first, so every header and body byte reaches one validation and budget (deployments.edge).
SERVE_EDGE_ENV = {"RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": "deployments.edge.http_middlewares"}


class ServeConfig(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    app_name: str = "retrieval"
    route_prefix: str = "/"
    # Environment of every Ray process (Ray Serve's own switches, read when its processes
    # start): set by the local run before Ray starts, and on every Ray container by the chart.
    # SERVE_TRANSPORT_ENV and SERVE_EDGE_ENV fill the keys this leaves out.
    env: dict[str, str] = Field(default_factory=dict, validate_default=True)
    chunker: DeploymentSettings = Field(default_factory=DeploymentSettings)
    dense: DeploymentSettings = Field(default_factory=DeploymentSettings)
    splade: DeploymentSettings = Field(default_factory=DeploymentSettings)
    reranker: DeploymentSettings = Field(default_factory=DeploymentSettings)
    store: DeploymentSettings = Field(default_factory=DeploymentSettings)
    # The LLM (answers, query understanding); bound only when llm.enabled.
    llm: DeploymentSettings = Field(default_factory=DeploymentSettings)
    ingress: DeploymentSettings = Field(
        default_factory=lambda: DeploymentSettings(max_ongoing_requests=64)
    )
    batching: BatchingSettings = Field(default_factory=BatchingSettings)

    @model_validator(mode="before")
    @classmethod
    def _drop_retired_batching(cls, data: Any) -> Any:
        """``max_batch_size`` / ``batch_wait_timeout_s`` configured Serve's ``@serve.batch``,
        which the model queues replaced; older files still load, with one warning."""
        if not isinstance(data, dict):
            return data
        retired = [
            name
            for name, settings in data.items()
            if isinstance(settings, dict) and RETIRED_BATCHING & settings.keys()
        ]
        if retired:
            data = {
                name: {k: v for k, v in data[name].items() if k not in RETIRED_BATCHING}
                if name in retired
                else settings
                for name, settings in data.items()
            }
            log.warning(
                "serve.%s: max_batch_size and batch_wait_timeout_s are no longer used "
                "(batching is the model queue's: dense.queue, splade.queue, reranker.queue)",
                "/".join(retired),
            )
        return data

    @field_validator("env")
    @classmethod
    def _default_transport(cls, env: dict[str, str]) -> dict[str, str]:
        return {**SERVE_TRANSPORT_ENV, **SERVE_EDGE_ENV, **env}

    @model_validator(mode="after")
    def _default_access_logs(self) -> ServeConfig:
        for name in ("chunker", "dense", "splade", "reranker", "store", "llm", "ingress"):
            settings: DeploymentSettings = getattr(self, name)
            if settings.access_log is None:
                settings.access_log = name == "ingress"
        return self


def check_layers(config: AppConfig, serve: ServeConfig) -> None:
    """The rules between the library's sections and this one (ConfigError naming both)."""
    auth = config.api.auth
    if auth.mode == "none" and not is_loopback(serve.host):
        raise ConfigError(
            f"api.auth.mode 'none' on serve.host {serve.host!r}: unauthenticated serving is "
            "allowed only on a loopback bind (127.0.0.1)"
        )
    jwt = auth.jwt
    if jwt.enabled and not is_loopback(serve.host) and not (jwt.audience and jwt.issuer):
        raise ConfigError(
            f"api.auth.jwt.audience and issuer are required when serving on {serve.host!r}: "
            "a token minted for another service must not pass"
        )
    store = serve.store
    if config.stores.topology == "embedded" and (
        store.num_replicas != 1 or store.autoscaling is not None
    ):
        # The server topologies hold no data in the replica and may scale out.
        raise ConfigError(
            "serve.store: the embedded store has one owning replica (num_replicas: 1)"
        )

    llm = config.llm
    admitted = llm.parallel + llm.max_queued
    if llm.enabled and serve.llm.max_ongoing_requests <= admitted:
        # Serve would hold the excess at the caller, unbounded, before the replica's own
        # admission can refuse it with 429; one more for the health pings.
        raise ConfigError(
            f"serve.llm.max_ongoing_requests ({serve.llm.max_ongoing_requests}) must exceed "
            f"llm.parallel + llm.max_queued ({admitted}) so every replica answers its own "
            "overload with 429"
        )


def serve_settings(config: AppConfig) -> ServeConfig:
    """The ``serve:`` section of ``config``, validated (ConfigError naming the field)."""
    try:
        serve = ServeConfig.model_validate(config.serve)
    except ValidationError as error:
        fields = "; ".join(
            f"serve.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        raise ConfigError(f"invalid configuration: {fields}") from None
    check_layers(config, serve)
    return serve


def with_serve(config: AppConfig, **changes: Any) -> AppConfig:
    """``config`` with fields of its ``serve:`` section changed (the local run's port)."""
    return config.model_copy(update={"serve": {**config.serve, **changes}})
