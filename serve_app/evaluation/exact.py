"""Exact in-memory retrieval over an encoded corpus, for tuning: every query against every chunk.

The stores answer the same scoring functions (dot products; BM25 as stored term weights times
the engine's IDF, ``ln(1 + (N - n + 0.5) / (n + 0.5))``), but through approximate indexes and
one query at a time; here a whole query set is scored with numpy in seconds, so a parameter
grid costs no model and no index.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from serve_app.encoders.bm25 import bm25_weights
from serve_app.evaluation.encodings import SparseMatrix

Hits = list[tuple[int, float]]  # (chunk index, score), best first


class SparseIndex:
    """An inverted index over rows of sparse vectors (documents x terms)."""

    def __init__(self, matrix: SparseMatrix) -> None:
        self.rows = matrix.rows
        terms, compact = np.unique(matrix.indices, return_inverse=True)
        self.term_ids = {int(t): i for i, t in enumerate(terms)}
        order = np.argsort(compact, kind="stable")
        row_of = np.repeat(np.arange(matrix.rows), np.diff(matrix.indptr))
        self.postings_rows = row_of[order]
        self.postings_values = matrix.values[order].astype(np.float64)
        self.term_ptr = np.zeros(len(terms) + 1, dtype=np.int64)
        np.cumsum(np.bincount(compact, minlength=len(terms)), out=self.term_ptr[1:])

    def document_frequency(self, term: int) -> int:
        i = self.term_ids.get(term)
        return 0 if i is None else int(self.term_ptr[i + 1] - self.term_ptr[i])

    def scores(self, terms: Sequence[int], weights: Sequence[float]) -> np.ndarray:
        """Dot product of the query (terms, weights) with every row."""
        rows, values = [], []
        for term, weight in zip(terms, weights, strict=True):
            i = self.term_ids.get(int(term))
            if i is None or weight == 0:
                continue
            start, end = self.term_ptr[i], self.term_ptr[i + 1]
            rows.append(self.postings_rows[start:end])
            values.append(self.postings_values[start:end] * weight)
        if not rows:
            return np.zeros(self.rows)
        return np.bincount(np.concatenate(rows), np.concatenate(values), minlength=self.rows)


def top_hits(scores: np.ndarray, depth: int) -> Hits:
    """The ``depth`` best rows, best first (ties by row), rows scoring 0 or less left out for
    sparse scores the caller zeroes; dense scores are all kept."""
    depth = min(depth, len(scores))
    picked = np.argpartition(-scores, depth - 1)[:depth]
    picked = picked[np.lexsort((picked, -scores[picked]))]
    return [(int(i), float(scores[i])) for i in picked]


def sparse_top_hits(scores: np.ndarray, depth: int) -> Hits:
    """``top_hits`` over the rows that match at all (a sparse search returns no others)."""
    return [(i, s) for i, s in top_hits(scores, depth) if s > 0]


def dense_hits(queries: np.ndarray, chunks: np.ndarray, depth: int) -> list[Hits]:
    scores = queries @ chunks.T
    return [top_hits(row, depth) for row in scores]


def idf(document_frequency: int, documents: int) -> float:
    """The engine's IDF (Qdrant's ``Modifier.IDF``)."""
    n = document_frequency
    return math.log(1 + (documents - n + 0.5) / (n + 0.5))


@dataclass(frozen=True)
class Bm25Setting:
    """BM25 parameters; ``title_weight`` counts header terms that many times (BM25F in one
    field); ``fields`` ``separate`` scores header and body as two BM25 fields instead and adds
    ``title_weight`` x the header's score (each field with its own length normalisation and
    IDF, its average length the corpus's own)."""

    k1: float = 1.2
    b: float = 0.75
    avg_len: float = 180.0
    title_weight: float = 1.0
    fields: str = "one"  # one | separate


class Bm25Scorer:
    """BM25 over chunk term counts (``title_counts`` + ``body_counts``) for one setting."""

    def __init__(
        self,
        title_counts: Sequence[Mapping[int, int]],
        body_counts: Sequence[Mapping[int, int]],
        setting: Bm25Setting,
    ) -> None:
        self.setting = setting
        self.counts: list[dict[int, float]] = []
        if setting.fields == "separate":
            self.parts = [
                (_Bm25Field(title_counts, setting), setting.title_weight),
                (_Bm25Field(body_counts, setting), 1.0),
            ]
        else:
            merged = []
            for title, body in zip(title_counts, body_counts, strict=True):
                counts: dict[int, float] = {t: float(c) for t, c in body.items()}
                for t, c in title.items():
                    counts[t] = counts.get(t, 0.0) + setting.title_weight * c
                merged.append(counts)
            self.parts = [(_Bm25Field(merged, setting, avg_len=setting.avg_len), 1.0)]
        self.counts = self.parts[-1][0].counts

    def scores(self, terms: Mapping[int, float]) -> np.ndarray:
        """BM25 of a query given as term -> query weight (1.0 per distinct term)."""
        total = None
        for field, weight in self.parts:
            part = field.scores(terms) * weight
            total = part if total is None else total + part
        assert total is not None
        return total

    def idf(self, term: int) -> float:
        field = self.parts[-1][0]
        return idf(field.index.document_frequency(term), field.index.rows)


class _Bm25Field:
    def __init__(
        self,
        counts: Sequence[Mapping[int, float]],
        setting: Bm25Setting,
        avg_len: float | None = None,
    ) -> None:
        self.counts = [dict(c) for c in counts]
        if avg_len is None:
            lengths = [sum(c.values()) for c in counts]
            avg_len = max(sum(lengths) / max(len(lengths), 1), 1e-9)
        rows = [bm25_weights(c, setting.k1, setting.b, avg_len) for c in counts]
        self.index = SparseIndex(SparseMatrix.from_rows(rows))

    def scores(self, terms: Mapping[int, float]) -> np.ndarray:
        n = self.index.rows
        ids = list(terms)
        weights = [terms[t] * idf(self.index.document_frequency(t), n) for t in ids]
        return self.index.scores(ids, weights)


@dataclass(frozen=True)
class Rm3Setting:
    """RM3 (Lavrenko and Croft's relevance model, interpolated as in Anserini): the
    ``fb_docs`` best chunks of a first BM25 pass give ``P(t|R) = sum_d P(t|d) P(d|q)`` (``P(d|q)``
    the first-pass scores normalised to sum 1, ``P(t|d)`` the term's share of the chunk's
    terms); the ``fb_terms`` most likely terms, renormalised, are mixed with the original
    query (each term ``1/|q|``) as ``alpha * original + (1 - alpha) * feedback``."""

    fb_docs: int = 10
    fb_terms: int = 10
    alpha: float = 0.5


def rm3_query(
    query: Mapping[int, float],
    first_pass: Hits,
    counts: Sequence[Mapping[int, float]],
    setting: Rm3Setting,
) -> dict[int, float]:
    """The expanded BM25 query (term -> weight) from a first pass's hits."""
    feedback = first_pass[: setting.fb_docs]
    total = sum(max(score, 0.0) for _, score in feedback)
    relevance: dict[int, float] = {}
    for row, score in feedback:
        p_doc = max(score, 0.0) / total if total > 0 else 1.0 / len(feedback)
        doc = counts[row]
        length = sum(doc.values()) or 1.0
        for term, tf in doc.items():
            relevance[term] = relevance.get(term, 0.0) + p_doc * tf / length
    top = sorted(relevance.items(), key=lambda item: (-item[1], item[0]))[: setting.fb_terms]
    norm = sum(v for _, v in top) or 1.0
    original = {t: 1.0 / len(query) for t in query} if query else {}
    expanded = {t: setting.alpha * w for t, w in original.items()}
    for term, value in top:
        expanded[term] = expanded.get(term, 0.0) + (1 - setting.alpha) * value / norm
    return expanded
