"""The SPLADE deployment: batched like the dense one; queries and documents pruned differently."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ray import serve

from deployments.options import configure_batching
from serve_app.config import config_from_dict
from serve_app.encoders.splade import SpladeEncoder
from serve_app.schemas import SparseVector


@serve.deployment(name="splade")
class SpladeDeployment:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config_from_dict(config, "serve args")
        self.encoder = SpladeEncoder(self.config.splade)
        configure_batching(self._encode_batch, self.config.serve.splade)

    def info(self) -> dict[str, Any]:
        return {"model_id": self.encoder.model_id}

    def ping(self) -> str:
        return "ok"

    async def encode(self, mode: str, texts: list[str]) -> tuple[list[SparseVector], dict]:
        return await self._encode_batch((mode, texts, time.perf_counter()))

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)
    async def _encode_batch(
        self, requests: list[tuple[str, list[str], float]]
    ) -> list[tuple[list[SparseVector], dict]]:
        started = time.perf_counter()
        results: list[tuple[list[SparseVector], dict] | None] = [None] * len(requests)
        for mode in ("query", "document"):
            picked = [i for i, (m, _, _) in enumerate(requests) if m == mode]
            if not picked:
                continue
            top_k = (
                self.config.splade.query_top_k if mode == "query" else self.config.splade.doc_top_k
            )
            texts = [t for i in picked for t in requests[i][1]]
            vectors, stats = await asyncio.to_thread(self.encoder.encode_with_stats, texts, top_k)
            position = 0
            for i in picked:
                count = len(requests[i][1])
                stats_i = {**stats, "requests": len(requests), "queue_s": started - requests[i][2]}
                results[i] = (vectors[position : position + count], stats_i)
                position += count
        return [r for r in results if r is not None]

    def check_health(self) -> None:
        if self.encoder is None:
            raise RuntimeError("SPLADE model not loaded")
