"""Encoders behind small protocols: dense, sparse (SPLADE, BM25) and the reranker."""

from serve_app.encoders.base import (
    DENSE_BACKENDS,
    RERANKER_BACKENDS,
    DenseEncoder,
    Reranker,
    SparseEncoder,
)

__all__ = ["DENSE_BACKENDS", "RERANKER_BACKENDS", "DenseEncoder", "Reranker", "SparseEncoder"]
