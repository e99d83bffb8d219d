"""Encoder protocols. Async, so a Ray Serve handle is just another implementation."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from serve_app.catalog import Catalog
from serve_app.encoders.queue import Lane
from serve_app.schemas import SparseVector


@runtime_checkable
class DenseEncoder(Protocol):
    model_id: str
    dim: int

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        """(n, dim) float32, L2-normalised rows."""
        ...

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        """(n, dim) float32; queries may carry an instruction, documents never do."""
        ...


@runtime_checkable
class LaneDenseEncoder(DenseEncoder, Protocol):
    """What the dense Serve deployment needs: one entry for both lanes of the model queue
    (queries are formatted inside), with the batch's statistics for /metrics."""

    async def encode_lane(self, lane: Lane, texts: list[str]) -> tuple[np.ndarray, dict]: ...

    async def check_health(self) -> None:
        """ServiceUnavailableError once the model cannot answer (its queue closed, a worker
        thread gone)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class SparseEncoder(Protocol):
    model_id: str

    async def encode_documents(self, texts: list[str]) -> list[SparseVector]: ...

    async def encode_queries(self, texts: list[str]) -> list[SparseVector]: ...


@runtime_checkable
class Reranker(Protocol):
    model_id: str

    async def score(self, query: str, passages: list[str]) -> list[float]:
        """Relevance in [0, 1] for each passage, in input order."""
        ...


@runtime_checkable
class ServedReranker(Reranker, Protocol):
    """What the reranker Serve deployment needs: scores plus the batch's statistics."""

    async def score_with_stats(
        self, query: str, passages: list[str]
    ) -> tuple[list[float], dict]: ...

    async def check_health(self) -> None: ...

    def close(self) -> None: ...


DENSE_BACKENDS: Catalog[DenseEncoder] = Catalog("dense backend", "dense.backend")
RERANKER_BACKENDS: Catalog[Reranker] = Catalog("reranker backend", "reranker.backend")
DENSE_BACKENDS.register_lazy("transformers", "serve_app.encoders.dense_transformers:build")
DENSE_BACKENDS.register_lazy("vllm", "serve_app.encoders.dense_vllm:build")
DENSE_BACKENDS.register_lazy("vllm-http", "serve_app.encoders.dense_vllm_http:build")
RERANKER_BACKENDS.register_lazy("transformers", "serve_app.encoders.reranker:build")
RERANKER_BACKENDS.register_lazy("vllm", "serve_app.encoders.reranker_vllm:build")
