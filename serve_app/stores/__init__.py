"""Stores: the ``ChunkIndex`` protocol and its topologies, picked by name from ``TOPOLOGIES``."""

from serve_app.stores.base import (
    TOPOLOGIES,
    ChunkIndex,
    EncodedChunk,
    Hit,
    IndexModels,
    QueryVectors,
)

__all__ = ["TOPOLOGIES", "ChunkIndex", "EncodedChunk", "Hit", "IndexModels", "QueryVectors"]
