"""Stores: the ``ChunkIndex`` protocol and its topologies, picked by name from ``TOPOLOGIES``."""

from serve_app.stores.protocols import ChunkIndex
from serve_app.stores.topologies import TOPOLOGIES
from serve_app.stores.values import EncodedChunk, Hit, IndexModels, QueryVectors

__all__ = ["TOPOLOGIES", "ChunkIndex", "EncodedChunk", "Hit", "IndexModels", "QueryVectors"]
