"""Chunkers: one interface (``Chunker``), picked by name from ``CHUNKERS``."""

from serve_app.chunking.base import CHUNKERS, Chunker, canonical_text, chunk_id, document_hash

__all__ = ["CHUNKERS", "Chunker", "canonical_text", "chunk_id", "document_hash"]
