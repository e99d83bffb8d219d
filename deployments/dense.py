"""The dense embedder deployment: requests batched by Serve, then by token budget."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from ray import serve

from deployments.options import configure_batching
from serve_app.config import config_from_dict
from serve_app.encoders.base import DENSE_BACKENDS
from serve_app.pipelines.components import register_builtins


@serve.deployment(name="dense")
class DenseDeployment:
    """Loads the dense model once per replica. Each call carries a list of texts and a mode
    (``document`` or ``query``); concurrent calls are merged by ``@serve.batch`` and encoded
    in one token-budget batching pass. Returns the vectors and the batch's statistics.
    Every dense backend (transformers, vllm, vllm-http) keeps blocking work off the replica's
    event loop inside ``embed_formatted``."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config_from_dict(config, "serve args")
        register_builtins()
        self.encoder = DENSE_BACKENDS.create(self.config.dense.backend, self.config.dense)
        configure_batching(self._embed_batch, self.config.serve.dense)

    def info(self) -> dict[str, Any]:
        return {
            "model_id": self.encoder.model_id,
            "dim": self.encoder.dim,
            "backend": self.config.dense.backend,
            "encoder": type(self.encoder).__name__,
        }

    def ping(self) -> str:
        return "ok"

    async def embed(self, mode: str, texts: list[str]) -> tuple[np.ndarray, dict]:
        return await self._embed_batch((mode, texts, time.perf_counter()))

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)
    async def _embed_batch(
        self, requests: list[tuple[str, list[str], float]]
    ) -> list[tuple[np.ndarray, dict]]:
        started = time.perf_counter()
        texts = [
            self.encoder.format_query(t) if mode == "query" else t
            for mode, batch, _ in requests
            for t in batch
        ]
        vectors, stats = await self.encoder.embed_formatted(texts)
        stats = {**stats, "requests": len(requests)}
        out, position = [], 0
        for _, batch, enqueued in requests:
            out.append(
                (
                    vectors[position : position + len(batch)],
                    {**stats, "queue_s": started - enqueued},
                )
            )
            position += len(batch)
        return out

    def check_health(self) -> None:
        if self.encoder is None:
            raise RuntimeError("dense model not loaded")

    def __del__(self) -> None:
        # vLLM backends own an engine process; stop it with the replica.
        close = getattr(getattr(self, "encoder", None), "close", None)
        if close is not None:
            close()
