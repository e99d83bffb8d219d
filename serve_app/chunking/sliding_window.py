"""Sliding window over the whole body in model tokens (size, overlap); crosses sections."""

from __future__ import annotations

import asyncio

from serve_app.chunking.base import (
    CHUNKERS,
    block_at,
    canonical_text,
    contextual_header,
    make_chunks,
)
from serve_app.chunking.tokens import TokenCounter
from serve_app.schemas import Chunk, Document


class SlidingWindowChunker:
    name = "sliding_window"

    def __init__(
        self,
        counter: TokenCounter,
        max_tokens: int = 256,
        overlap_tokens: int = 32,
        contextual_header: bool = True,
    ) -> None:
        if overlap_tokens >= max_tokens:
            raise ValueError("overlap_tokens must be smaller than max_tokens")
        self.counter = counter
        self.max_tokens = max_tokens
        self.overlap_tokens = overlap_tokens
        self.contextual_header = contextual_header

    def fingerprint(self) -> dict:
        return {
            "chunker": self.name,
            "max_tokens": self.max_tokens,
            "overlap_tokens": self.overlap_tokens,
            "contextual_header": self.contextual_header,
        }

    async def chunk_many(self, documents: list[Document]) -> list[list[Chunk]]:
        """Chunks of each document, computed off the event loop."""
        return await asyncio.to_thread(lambda: [self.chunk(d) for d in documents])

    def budget(self, document: Document, chains: list[tuple[str, ...]]) -> int:
        """Tokens left for body text once special tokens and the longest header are counted."""
        header = 0
        if self.contextual_header:
            headers = [contextual_header(document.title, c) for c in chains] or [document.title]
            header = max(self.counter.count(headers)) + 1
        budget = self.max_tokens - self.counter.reserved - header
        if budget < 16:
            raise ValueError(
                f"document {document.id!r}: header leaves {budget} tokens of {self.max_tokens}"
            )
        return budget

    def chunk(self, document: Document) -> list[Chunk]:
        canonical, blocks = canonical_text(document)
        budget = self.budget(document, [b.chain for b in blocks])
        overlap = min(self.overlap_tokens, budget - 1)
        windows = self.counter.windows(canonical, 0, budget, overlap)
        spans = [(s, e, block_at(blocks, s).chain, {}) for s, e in windows]
        return make_chunks(document, canonical, spans)


@CHUNKERS.register("sliding_window")
def _build(counter: TokenCounter, config, **_: object) -> SlidingWindowChunker:
    return SlidingWindowChunker(
        counter, config.max_tokens, config.overlap_tokens, config.contextual_header
    )
