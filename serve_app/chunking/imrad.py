"""IMRaD semantic chunking for research articles.

Top-level sections are mapped to canonical labels (Introduction, Methods, Results,
Discussion, plus Abstract); sentences (spaCy) are packed under the token budget inside one
canonical section, never across two, and subsections of one section flow together.
Optionally, an embedding-similarity breakpoint starts a new chunk where consecutive
sentences are least similar (below the given percentile of similarities in that section).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from serve_app.chunking.base import Block, canonical_text, make_chunks
from serve_app.chunking.packing import pack_sentences
from serve_app.chunking.sections import SectionChunker
from serve_app.chunking.sentences import SentenceSplitter
from serve_app.chunking.tokens import TokenCounter
from serve_app.schemas import Chunk, Document

# Sentence texts -> L2-normalised embeddings (rows).
SentenceEmbedder = Callable[[list[str]], np.ndarray]

_CANONICAL = [
    ("Abstract", re.compile(r"^(abstract|summary|author summary)\b")),
    ("Results and Discussion", re.compile(r"^results? and discussion")),
    ("Introduction", re.compile(r"^(introduction|background)\b")),
    (
        "Methods",
        re.compile(
            r"^(materials? (and|&) methods?|methods?( and materials?)?|methodology|"
            r"experimental (procedures?|section)|patients and methods|study design)\b"
        ),
    ),
    ("Results", re.compile(r"^(results?|findings)\b")),
    ("Discussion", re.compile(r"^(discussion|conclusions?|concluding remarks)\b")),
]


def imrad_label(title: str) -> str | None:
    """The canonical IMRaD label of a top-level section title, or None."""
    normalised = re.sub(r"^[\d.\s]+", "", title.strip().lower())
    for label, pattern in _CANONICAL:
        if pattern.match(normalised):
            return label
    return None


class ImradChunker(SectionChunker):
    name = "imrad"

    def __init__(
        self,
        counter: TokenCounter,
        splitter: SentenceSplitter,
        max_tokens: int = 256,
        overlap_tokens: int = 0,
        contextual_header: bool = True,
        embedder: SentenceEmbedder | None = None,
        threshold_percentile: float = 10.0,
    ) -> None:
        super().__init__(counter, splitter, max_tokens, overlap_tokens, contextual_header)
        self.embedder = embedder
        self.threshold_percentile = threshold_percentile

    def fingerprint(self) -> dict:
        return {
            **super().fingerprint(),
            "semantic_split": self.embedder is not None,
            "threshold_percentile": self.threshold_percentile,
        }

    def _groups(self, blocks: list[Block]) -> list[tuple[str, list[Block]]]:
        """Consecutive blocks grouped by their top-level section."""
        groups: list[tuple[str, list[Block]]] = []
        for block in blocks:
            top = block.chain[0] if block.chain else ""
            if groups and groups[-1][0] == top:
                groups[-1][1].append(block)
            else:
                groups.append((top, [block]))
        return groups

    def _breakpoints(self, canonical: str, sentences: list[tuple[int, int]]) -> frozenset[int]:
        if self.embedder is None or len(sentences) < 3:
            return frozenset()
        vectors = self.embedder([canonical[s:e] for s, e in sentences])
        similarity = np.sum(vectors[:-1] * vectors[1:], axis=1)
        threshold = np.percentile(similarity, self.threshold_percentile)
        return frozenset(int(i) + 1 for i in np.nonzero(similarity < threshold)[0])

    def chunk(self, document: Document) -> list[Chunk]:
        canonical, blocks = canonical_text(document)
        budget = self.budget(document, [b.chain for b in blocks])
        spans = []
        for top, group in self._groups(blocks):
            label = imrad_label(top) or "Other"
            sentences = [
                span
                for block in group
                for span in self.splitter.split(canonical[block.start : block.end], block.start)
            ]
            pieces = pack_sentences(
                canonical,
                sentences,
                self.counter,
                budget,
                self.overlap_tokens,
                self._breakpoints(canonical, sentences),
            )
            for start, end in pieces:
                chain = next((b.chain for b in reversed(group) if b.start <= start), group[0].chain)
                spans.append((start, end, chain, {"imrad": label}))
        return make_chunks(document, canonical, spans)


def build(
    counter: TokenCounter, config, embedder: SentenceEmbedder | None = None, **_: object
) -> ImradChunker:
    return ImradChunker(
        counter,
        SentenceSplitter(config.spacy_model),
        config.max_tokens,
        config.overlap_tokens,
        config.contextual_header,
        embedder if config.semantic_split else None,
        config.semantic_threshold_percentile,
    )
