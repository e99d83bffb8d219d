"""The cross-encoder reranker deployment: (query, passages) calls batched into pair batches."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ray import serve

from deployments.options import configure_batching
from serve_app.config import config_from_dict
from serve_app.encoders.base import RERANKER_BACKENDS
from serve_app.pipelines.components import register_builtins


@serve.deployment(name="reranker")
class RerankerDeployment:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config_from_dict(config, "serve args")
        register_builtins()
        self.reranker = RERANKER_BACKENDS.create(self.config.reranker.backend, self.config.reranker)
        configure_batching(self._score_batch, self.config.serve.reranker)

    def info(self) -> dict[str, Any]:
        return {"model_id": self.reranker.model_id}

    def ping(self) -> str:
        return "ok"

    async def score(self, query: str, passages: list[str]) -> tuple[list[float], dict]:
        return await self._score_batch((query, passages, time.perf_counter()))

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005)
    async def _score_batch(
        self, requests: list[tuple[str, list[str], float]]
    ) -> list[tuple[list[float], dict]]:
        started = time.perf_counter()
        queries = [q for q, passages, _ in requests for _ in passages]
        passages = [p for _, batch, _ in requests for p in batch]
        scores, stats = await asyncio.to_thread(self.reranker.score_pairs, queries, passages)
        out, position = [], 0
        for _, batch, enqueued in requests:
            out.append(
                (
                    scores[position : position + len(batch)],
                    {**stats, "requests": len(requests), "queue_s": started - enqueued},
                )
            )
            position += len(batch)
        return out

    def check_health(self) -> None:
        if self.reranker is None:
            raise RuntimeError("reranker not loaded")

    def __del__(self) -> None:
        # vLLM backends own an engine process; stop it with the replica.
        close = getattr(getattr(self, "reranker", None), "close", None)
        if close is not None:
            close()
