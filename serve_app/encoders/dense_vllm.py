"""Dense embeddings with an in-process vLLM engine (``vllm.LLM``, pooling runner)."""

from __future__ import annotations

from typing import Any

import numpy as np

from serve_app.config import DenseConfig, resolve_model_path
from serve_app.encoders.dense_inputs import DenseInputs, finish_vectors, output_dim
from serve_app.encoders.queue import Lane, ModelQueue
from serve_app.encoders.torch_runtime import ModelLock
from serve_app.encoders.vllm_runtime import (
    check_vllm_device,
    engine_kwargs,
    set_cpu_kv_cache,
    start_engine,
)

# vLLM's names for the pooling of each model family.
_POOLING = {"mean": "MEAN", "cls": "CLS", "last_token": "LAST"}


class VllmDenseEncoder:
    """The dense embedder on vLLM, with the same inputs as the transformers backend.

    Texts are tokenised here (``DenseInputs``: query instruction, truncation to
    ``max_length``, the appended ``<|endoftext|>`` of Qwen3-Embedding) and given to
    ``llm.embed`` as token ids, so both backends pool over exactly the same tokens. The
    pooling is set explicitly (``last_token`` -> vLLM ``LAST``), without vLLM's own
    normalisation: vectors are truncated to ``output_dim`` (Matryoshka) first, then
    L2-normalised. vLLM schedules under its own token budget (``max_num_batched_tokens`` from
    ``dense.max_batch_tokens``) without padding, so the reported padding ratio is 0.

    ``llm.embed`` blocks: the async methods run it on the model queue's worker thread.
    Raises ConfigError at construction when the device and the installed vLLM disagree.
    """

    def __init__(self, config: DenseConfig) -> None:
        self.config = config
        self.model_id = config.model
        platform = check_vllm_device(config.device, "dense.device")
        path = resolve_model_path(config.model, config.revision)
        self.inputs = DenseInputs(config)
        set_cpu_kv_cache(config.vllm, platform)
        from vllm.config import PoolerConfig

        kwargs = engine_kwargs(
            config.vllm,
            model=path,
            dtype=config.dtype,
            max_length=config.max_length,
            batch_size=config.batch_size,
            max_batch_tokens=config.max_batch_tokens,
        )
        kwargs["convert"] = "embed"
        kwargs["pooler_config"] = PoolerConfig(
            pooling_type=_POOLING[config.pooling], use_activation=False
        )
        self.llm: Any = start_engine(kwargs)
        self.model_dim = int(self.llm.llm_engine.model_config.get_hidden_size())
        self.dim = output_dim(config, self.model_dim)
        self._lock = ModelLock()
        self.queue = ModelQueue(
            "dense",
            self._run_lane,
            config.queue.query_batch_size,
            config.queue.documents(config.batch_size),
        )

    def format_query(self, query: str) -> str:
        return self.inputs.format_query(query)

    def encode_with_stats(self, texts: list[str]) -> tuple[np.ndarray, dict]:
        """Blocking: vectors for already-formatted texts, plus batching stats."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32), {"batch_size": 0}
        from vllm import TokensPrompt

        ids = self.inputs.token_ids(texts)
        prompts = [TokensPrompt(prompt_token_ids=x) for x in ids]
        with self._lock:
            outputs = self.llm.embed(prompts, use_tqdm=False)
        vectors = np.asarray([o.outputs.embedding for o in outputs], dtype=np.float32)
        stats = {
            "batch_size": len(texts),
            "model_batches": 1,
            "tokens": sum(len(x) for x in ids),
            "padding_ratio": 0.0,
        }
        return finish_vectors(vectors, self.dim, self.config.normalize), stats

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.encode_with_stats(texts)[0]

    def encode_queries_sync(self, texts: list[str]) -> np.ndarray:
        return self.encode([self.format_query(t) for t in texts])

    def _run_lane(self, lane: Lane, texts: list[str]) -> tuple[np.ndarray, dict]:
        return self.encode_with_stats(
            [self.format_query(t) for t in texts] if lane == "query" else texts
        )

    async def encode_lane(self, lane: Lane, texts: list[str]) -> tuple[np.ndarray, dict]:
        """Vectors and batch statistics through the model queue (queries are formatted)."""
        vectors, stats = await self.queue.submit(lane, texts)
        return np.asarray(vectors), stats

    async def embed_formatted(self, texts: list[str]) -> tuple[np.ndarray, dict]:
        """Texts already formatted (documents, or queries with their instruction)."""
        return await self.encode_lane("document", texts)

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return (await self.encode_lane("document", texts))[0]

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        return (await self.encode_lane("query", texts))[0]

    async def check_health(self) -> None:
        self.queue.check_health()

    def close(self) -> None:
        """Stop the queue and the engine (its worker process included)."""
        self.queue.close()
        engine = getattr(self.llm, "llm_engine", None)
        shutdown = getattr(engine, "engine_core", None)
        if shutdown is not None and hasattr(shutdown, "shutdown"):
            shutdown.shutdown()


def build(config: DenseConfig) -> VllmDenseEncoder:
    return VllmDenseEncoder(config)
