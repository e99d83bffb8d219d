"""Hybrid document retrieval: BM25 + SPLADE + dense, fused and reranked.

The library is pure Python and async; it runs in-process, and the Ray Serve layer in
``deployments/`` wraps it without changing it.
"""

__version__ = "0.1.0"
