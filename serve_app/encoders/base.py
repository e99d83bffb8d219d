"""Encoder protocols. Async, so a Ray Serve handle is just another implementation."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from serve_app.registry import Registry
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
class BatchedDenseEncoder(DenseEncoder, Protocol):
    """What the dense Serve deployment needs: it formats queries itself so that one batch can
    mix queries and documents, and reads the batching statistics for /metrics."""

    def format_query(self, query: str) -> str: ...

    async def embed_formatted(self, texts: list[str]) -> tuple[np.ndarray, dict]:
        """Vectors for already-formatted texts, plus stats (batch_size, padding_ratio, ...)."""
        ...


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


DENSE_BACKENDS: Registry[DenseEncoder] = Registry("dense backend", "dense.backend")
RERANKER_BACKENDS: Registry[Reranker] = Registry("reranker backend", "reranker.backend")
