"""Multi-query aggregation as pure functions: one ranked list per sub-query in, one list of
documents out. No I/O. The rank part is ``serve_app.fusion.strategies.rrf`` (one algorithm, one place).

Input: ``[[(doc_id, similarity), ...], ...]``, one list per sub-query, best first, as that
sub-query's retrieval ranked its chunks; several chunks of one document count once, at the
document's best rank (the first time it appears), with that chunk's similarity.

For each document ``d`` found by the set ``Q_d`` of the sub-queries, each sub-query ``q``
weighing ``v_q`` (1 unless ``weights`` say; the answer pipeline gives the question's own list
``answer.multi_query.question_weight``)::

    rrf(d)            = sum_{q in Q_d} v_q / (k + rank_q(d))        (ranks from 1)
    normalized_rrf(d) = rrf(d) / (sum_q v_q / (k + 1))                (1.0: first in every list)
    avg_similarity(d) = sum_{q in Q_d} v_q * similarity_q(d) / sum_{q in Q_d} v_q
    score(d)          = w * avg_similarity(d) + (1 - w) * normalized_rrf(d)

``normalized_rrf`` is divided by its largest possible value, not by the best document's, so a
document found by one sub-query out of three (equal weights) keeps a third of the weight of one
found by all three whatever else was retrieved. ``similarity`` should lie in [0, 1] (the
pipeline passes the reranker's score, else the dense cosine, else the min-max normalised fused
score). Ties are broken by the best rank reached, then by document id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from serve_app.fusion.strategies import RRF_K, rrf

SubQueryList = Sequence[tuple[str, float]]


@dataclass(frozen=True)
class AggregatedDocument:
    doc_id: str
    score: float
    rrf: float
    normalized_rrf: float
    avg_similarity: float
    # Sub-query index -> the document's rank in that sub-query's list (1 = first).
    ranks: dict[int, int]

    @property
    def found_by(self) -> list[int]:
        """The sub-queries (their indexes) whose retrieval found this document."""
        return sorted(self.ranks)


def first_per_document(hits: SubQueryList) -> list[tuple[str, float]]:
    """``hits`` with each document's first (best) entry only, in order."""
    seen: set[str] = set()
    out = []
    for doc_id, similarity in hits:
        if doc_id not in seen:
            seen.add(doc_id)
            out.append((doc_id, similarity))
    return out


def aggregate_sub_queries(
    lists: Sequence[SubQueryList],
    k: int = RRF_K,
    similarity_weight: float = 0.5,
    weights: Sequence[float] | None = None,
) -> list[AggregatedDocument]:
    """Documents of every sub-query's list, scored as in the module docstring, best first;
    ``weights``: one positive weight per list (all 1 when None)."""
    if not 0.0 <= similarity_weight <= 1.0:
        raise ValueError("similarity_weight must lie in [0, 1]")
    weights = [1.0] * len(lists) if weights is None else list(weights)
    if len(weights) != len(lists) or not all(w > 0 for w in weights):
        raise ValueError("weights must hold one positive weight per sub-query list")
    if not lists:
        return []
    deduplicated = [first_per_document(hits) for hits in lists]
    fused = dict(
        rrf(
            {str(q): hits for q, hits in enumerate(deduplicated)},
            k=k,
            weights={str(q): weight for q, weight in enumerate(weights)},
        )
    )
    ceiling = sum(weights) / (k + 1)
    ranks: dict[str, dict[int, int]] = {}
    similarities: dict[str, list[tuple[float, float]]] = {}  # (weight, similarity)
    for q, hits in enumerate(deduplicated):
        for rank, (doc_id, similarity) in enumerate(hits, 1):
            ranks.setdefault(doc_id, {})[q] = rank
            similarities.setdefault(doc_id, []).append((weights[q], similarity))
    documents = []
    for doc_id, rank_of in ranks.items():
        pairs = similarities[doc_id]
        average = sum(w * x for w, x in pairs) / sum(w for w, _ in pairs)
        normalized = fused[doc_id] / ceiling
        documents.append(
            AggregatedDocument(
                doc_id=doc_id,
                score=similarity_weight * average + (1 - similarity_weight) * normalized,
                rrf=fused[doc_id],
                normalized_rrf=normalized,
                avg_similarity=average,
                ranks=dict(sorted(rank_of.items())),
            )
        )
    documents.sort(key=lambda d: (-d.score, min(d.ranks.values()), d.doc_id))
    return documents


def distinct_queries(queries: Sequence[str], limit: int) -> list[str]:
    """At most ``limit`` non-blank queries, the first of each case- and space-insensitive
    duplicate kept, in order."""
    seen: set[str] = set()
    out = []
    for query in queries:
        text = " ".join(query.split())
        key = text.casefold()
        if text and key not in seen:
            seen.add(key)
            out.append(text)
        if len(out) == limit:
            break
    return out
