"""Sliding window over the whole body in model tokens (size, overlap); crosses sections."""

from __future__ import annotations

import asyncio

from serve_app.chunking.base import (
    block_at,
    canonical_text,
    contextual_header,
    make_chunks,
)
from serve_app.chunking.tokens import TokenCounter, token_windows
from serve_app.errors import PayloadTooLargeError
from serve_app.schemas import Chunk, Document

MIN_BODY_TOKENS = 16
"""A chunk's header (title, heading chain) must leave at least this many tokens for text."""


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
        return await asyncio.to_thread(self.chunk_batch, documents)

    def budget(self, document: Document, chains: list[tuple[str, ...]]) -> int:
        """Tokens left for body text once special tokens and the longest header are counted.

        PayloadTooLargeError (413) when the header leaves fewer than ``MIN_BODY_TOKENS``:
        each chunk repeats it, so a long title or heading chain would otherwise make chunks
        of almost nothing but header."""
        return self.budgets([document], [chains])[0]

    def budgets(self, documents: list[Document], chains: list[list[tuple[str, ...]]]) -> list[int]:
        """``budget`` of each document, every header of the batch counted in one call."""
        headers = [
            [contextual_header(d.title, c) for c in doc_chains] or [d.title]
            for d, doc_chains in zip(documents, chains, strict=True)
        ]
        counts = iter(
            self.counter.count([h for hs in headers for h in hs]) if self.contextual_header else []
        )
        budgets = []
        for document, doc_headers in zip(documents, headers, strict=True):
            header = max(next(counts) for _ in doc_headers) + 1 if self.contextual_header else 0
            budget = self.max_tokens - self.counter.reserved - header
            if budget < MIN_BODY_TOKENS:
                error = PayloadTooLargeError(
                    f"document {document.id!r}: its title and longest heading chain take "
                    f"{header} tokens of the {self.max_tokens} each chunk may have "
                    f"(chunker.max_tokens), leaving {budget} for its text (at least "
                    f"{MIN_BODY_TOKENS} needed); shorten them",
                    details={"document": document.id, "header_tokens": header},
                )
                raise error
            budgets.append(budget)
        return budgets

    def chunk_batch(self, documents: list[Document]) -> list[list[Chunk]]:
        """Blocking: each document's chunks, the batch's bodies tokenized in one call."""
        canonical = [canonical_text(d) for d in documents]
        chains = [[b.chain for b in blocks] for _, blocks in canonical]
        budgets = self.budgets(documents, chains)
        offsets = self.counter.offsets_many([text for text, _ in canonical])
        chunks = []
        for document, (text, blocks), budget, spans_of in zip(
            documents, canonical, budgets, offsets, strict=True
        ):
            overlap = min(self.overlap_tokens, budget - 1)
            windows = token_windows(spans_of, 0, budget, overlap)
            spans = [(s, e, block_at(blocks, s).chain, {}) for s, e in windows]
            chunks.append(make_chunks(document, text, spans))
        return chunks

    def chunk(self, document: Document) -> list[Chunk]:
        return self.chunk_batch([document])[0]


def build(counter: TokenCounter, config, **_: object) -> SlidingWindowChunker:
    return SlidingWindowChunker(
        counter, config.max_tokens, config.overlap_tokens, config.contextual_header
    )
