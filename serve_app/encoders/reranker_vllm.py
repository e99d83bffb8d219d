"""Cross-encoder reranking with an in-process vLLM engine (``llm.score``)."""

from __future__ import annotations

from typing import Any

from serve_app.config import RerankerConfig, resolve_model_path
from serve_app.encoders.queue import PairQueue
from serve_app.encoders.torch_runtime import ModelLock
from serve_app.encoders.vllm_runtime import (
    check_vllm_device,
    engine_kwargs,
    set_cpu_kv_cache,
    start_engine,
)


class VllmReranker:
    """A one-logit sequence classifier on vLLM (Qwen-style rerankers such as
    ``Qwen3ForSequenceClassification``; ``reranker.vllm.hf_overrides`` passes vLLM's overrides
    through, but the prompt template of the original causal-LM Qwen3-Reranker is not applied
    here). ``llm.score`` builds each pair the model's way and returns
    the sigmoid of the logit, in [0, 1] like the transformers backend. Pairs are truncated to
    ``reranker.max_length`` tokens. Blocking calls run on the model queue's worker thread.
    """

    def __init__(self, config: RerankerConfig) -> None:
        self.config = config
        self.model_id = config.model
        platform = check_vllm_device(config.device, "reranker.device")
        set_cpu_kv_cache(config.vllm, platform)
        kwargs = engine_kwargs(
            config.vllm,
            model=resolve_model_path(config.model, config.revision),
            dtype=config.dtype,
            max_length=config.max_length,
            batch_size=config.batch_size,
            max_batch_tokens=config.max_batch_tokens,
        )
        kwargs["convert"] = "classify"
        self.llm: Any = start_engine(kwargs)
        self._lock = ModelLock()
        self.queue = PairQueue("reranker", self.score_pairs, config.queue)

    def score_pairs(self, queries: list[str], passages: list[str]) -> tuple[list[float], dict]:
        """Blocking: scores of (query, passage) pairs in input order, plus batch stats."""
        if not passages:
            return [], {"batch_size": 0}
        truncate = {"truncation": True, "max_length": self.config.max_length}
        with self._lock:
            outputs = self.llm.score(
                queries, passages, use_tqdm=False, tokenization_kwargs=truncate
            )
        scores = [float(o.outputs.score) for o in outputs]
        return scores, {"batch_size": len(passages), "model_batches": 1, "padding_ratio": 0.0}

    def score_sync(self, query: str, passages: list[str]) -> list[float]:
        return self.score_pairs([query] * len(passages), passages)[0]

    async def score_with_stats(self, query: str, passages: list[str]) -> tuple[list[float], dict]:
        return await self.queue.score(query, passages)

    async def score(self, query: str, passages: list[str]) -> list[float]:
        return (await self.queue.score(query, passages))[0]

    async def check_health(self) -> None:
        self.queue.check_health()

    def close(self) -> None:
        self.queue.close()
        engine = getattr(self.llm, "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()


def build(config: RerankerConfig) -> VllmReranker:
    return VllmReranker(config)
