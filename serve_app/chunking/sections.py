"""Section-aware chunking: never crosses a section boundary; long sections split by sentences."""

from __future__ import annotations

from serve_app.chunking.base import canonical_text, make_chunks
from serve_app.chunking.packing import pack_sentences
from serve_app.chunking.sentences import SentenceSplitter
from serve_app.chunking.sliding_window import SlidingWindowChunker
from serve_app.chunking.tokens import TokenCounter
from serve_app.schemas import Chunk, Document


class SectionChunker(SlidingWindowChunker):
    """One chunk per section when it fits; otherwise whole sentences packed under the budget."""

    name = "sections"

    def __init__(
        self,
        counter: TokenCounter,
        splitter: SentenceSplitter,
        max_tokens: int = 256,
        overlap_tokens: int = 32,
        contextual_header: bool = True,
    ) -> None:
        super().__init__(counter, max_tokens, overlap_tokens, contextual_header)
        self.splitter = splitter

    def fingerprint(self) -> dict:
        return {**super().fingerprint(), "sentences": self.splitter.model}

    def chunk_batch(self, documents: list[Document]) -> list[list[Chunk]]:
        """Document by document: sentence packing counts tokens section by section."""
        return [self.chunk(d) for d in documents]

    def chunk(self, document: Document) -> list[Chunk]:
        canonical, blocks = canonical_text(document)
        budget = self.budget(document, [b.chain for b in blocks])
        counts = self.counter.count([canonical[b.start : b.end] for b in blocks])
        spans = []
        for block, tokens in zip(blocks, counts, strict=True):
            if tokens <= budget:
                pieces = [(block.start, block.end)]
            else:
                sentences = self.splitter.split(canonical[block.start : block.end], block.start)
                pieces = pack_sentences(
                    canonical, sentences, self.counter, budget, self.overlap_tokens
                )
            spans.extend((s, e, block.chain, {}) for s, e in pieces)
        return make_chunks(document, canonical, spans)


def build(counter: TokenCounter, config, **_: object) -> SectionChunker:
    return SectionChunker(
        counter,
        SentenceSplitter(config.spacy_model),
        config.max_tokens,
        config.overlap_tokens,
        config.contextual_header,
    )
