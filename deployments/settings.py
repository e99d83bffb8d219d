"""The ``serve:`` section: what the Ray Serve layer owns (the HTTP bind, each deployment's
replicas, resources and drain, Ray Serve's transport switches), and ``ServiceConfig``: the
library's ``AppConfig`` with that section typed and every rule between the layers checked.
It is parsed once, where the application starts (the graph builder, the local run), and
bound to each deployment as the object itself: no replica parses it again."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from serve_app.config import AppConfig, Section, check_bind, config_from_dict, load_config
from serve_app.errors import ConfigError


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


class BatchingSettings(Section):
    """How concurrent calls share one call (natural batching, ``serve_app/batching.py``): an
    idle caller sends at once, a busy one sends what arrived during its previous call. The
    queries in one call to the store are the library's ``search.retrieve_batch``."""

    # Calls kept running at once towards one deployment: with one replica, one batch runs
    # while the next gathers; more replicas each take one (the replica's queue re-batches).
    calls_in_flight: int = Field(default=2, ge=1)
    query_batch: int = Field(default=64, ge=1)  # queries an ingress sends an encoder at once
    rerank_batch: int = Field(default=16, ge=1)  # rerank requests in one reranker call
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
# first, so every header and body byte reaches one validation and budget
# (deployments.replicas.edge).
SERVE_EDGE_ENV = {
    "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": "deployments.replicas.edge.http_middlewares"
}


# Set on every Ray process where Serve's HAProxy template is hardened (deployments.
# process_hook: the chart; a local run's worker setup hook): HAProxy then names each
# request's client in CLIENT_HEADER, which the edge believes only there.
HAPROXY_HOOK_ENV = "SERVE_APP_HAPROXY_HOOK"
CLIENT_HEADER = "X-Serve-App-Client"


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

    @field_validator("env")
    @classmethod
    def _default_transport(cls, env: dict[str, str]) -> dict[str, str]:
        # Upper case: an override from the environment (SERVE_APP__SERVE__ENV__RAY_...)
        # arrives lower-cased, as every variable name is read case-insensitively.
        return {**SERVE_TRANSPORT_ENV, **SERVE_EDGE_ENV, **{k.upper(): v for k, v in env.items()}}

    @model_validator(mode="after")
    def _default_access_logs(self) -> ServeConfig:
        for name in ("chunker", "dense", "splade", "reranker", "store", "llm", "ingress"):
            settings: DeploymentSettings = getattr(self, name)
            if settings.access_log is None:  # a default, not a setting: kept out of dumps
                settings.access_log = name == "ingress"
                settings.model_fields_set.discard("access_log")
        return self


class ServiceConfig(AppConfig):
    """The configuration the Ray Serve application runs: the library's sections and the
    ``serve:`` section typed, with the rules between them (ConfigError naming both)."""

    serve: ServeConfig = Field(default_factory=ServeConfig)

    @model_validator(mode="after")
    def _layers_agree(self) -> ServiceConfig:
        serve = self.serve
        check_bind(self.api.auth, serve.host)
        if self.stores.topology == "embedded" and (
            serve.store.num_replicas != 1 or serve.store.autoscaling is not None
        ):
            # The server topologies hold no data in the replica and may scale out.
            raise ConfigError(
                "serve.store: the embedded store has one owning replica (num_replicas: 1)"
            )
        llm = self.llm
        admitted = llm.parallel + llm.max_queued
        if llm.enabled and serve.llm.max_ongoing_requests <= admitted:
            # Serve would hold the excess at the caller, unbounded, before the replica's own
            # admission can refuse it with 429; one more for the health pings.
            raise ConfigError(
                f"serve.llm.max_ongoing_requests ({serve.llm.max_ongoing_requests}) must "
                f"exceed llm.parallel + llm.max_queued ({admitted}) so every replica answers "
                "its own overload with 429"
            )
        return self

    def as_args(self) -> dict[str, Any]:
        """The configuration as a Serve config's ``args`` carry it: the library's sections
        in full, the ``serve:`` section as the file gave it (its defaults stay this code's)."""
        return {
            **self.model_dump(mode="json", exclude={"serve"}),
            "serve": self.serve.model_dump(mode="json", exclude_unset=True),
        }


def service_config(
    source: AppConfig | Mapping[str, Any], origin: str = "<config>", **serve_changes: Any
) -> ServiceConfig:
    """``source`` as the configuration the application runs (ConfigError naming each field
    that is wrong); ``serve_changes`` replace fields of its ``serve:`` section (the local
    run's bind), and the whole is checked again with them. A ServiceConfig and no changes:
    ``source`` itself (the application's entry points take either and parse once)."""
    if isinstance(source, ServiceConfig) and not serve_changes:
        return source
    data = source.model_dump() if isinstance(source, BaseModel) else dict(source)
    if serve_changes:
        serve = data.get("serve") or {}
        data["serve"] = {**serve, **serve_changes}
    return config_from_dict(data, origin, ServiceConfig)


def load_service_config(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> ServiceConfig:
    """The YAML file with the environment's ``SERVE_APP__`` overrides, as ``ServiceConfig``."""
    return load_config(path, environ, ServiceConfig)
