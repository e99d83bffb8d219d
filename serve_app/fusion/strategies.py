"""Rank fusion as pure functions: ranked lists in, one fused ranking out. No I/O.

Input: ``{strategy: [(id, score), ...]}``, each list best first (as its retriever ranked it).
Output: ``[(id, fused_score), ...]`` best first; ``contributions`` says how much of each fused
score came from each list (they sum to it). Every function is deterministic: ties in
fused score are broken by the best (smallest) rank the id reached in any list, then by id.
An id missing from a list contributes nothing from that list. Weights default to 1.0 per
strategy; a strategy with weight 0 is ignored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from serve_app.schemas import FusionMethod

RankedList = Sequence[tuple[str, float]]
Fused = list[tuple[str, float]]

RRF_K = 60
"""Reciprocal-rank constant from Cormack et al. (2009); damps the weight of top ranks."""

DBSF_SIGMAS = 3.0
"""Distribution-based score fusion normalises scores to mean ± 3 standard deviations."""


def _weight(weights: Mapping[str, float] | None, strategy: str) -> float:
    return 1.0 if weights is None else float(weights.get(strategy, 1.0))


def _sorted(totals: dict[str, float], best_rank: dict[str, int]) -> Fused:
    return sorted(totals.items(), key=lambda item: (-item[1], best_rank[item[0]], item[0]))


Values = Callable[[str, RankedList], list[float]]
"""A method's value of each hit of one strategy's list, aligned with the list."""


def _accumulate(
    ranked: Mapping[str, RankedList], weights: Mapping[str, float] | None, values: Values
) -> Fused:
    totals: dict[str, float] = {}
    best_rank: dict[str, int] = {}
    for strategy in sorted(ranked):
        hits = ranked[strategy]
        weight = _weight(weights, strategy)
        if weight == 0 or not hits:
            continue
        for rank, ((doc, _), value) in enumerate(zip(hits, values(strategy, hits), strict=True), 1):
            # Every query fuses a few hundred hits: no call per hit (get, min) on this path.
            if doc in totals:
                totals[doc] += weight * value
                if rank < best_rank[doc]:
                    best_rank[doc] = rank
            else:
                totals[doc] = weight * value
                best_rank[doc] = rank
    return _sorted(totals, best_rank)


def _rrf_values(k: int) -> Values:
    if k < 1:
        raise ValueError("RRF k must be >= 1")
    return lambda _, hits: [1.0 / (k + rank) for rank in range(1, len(hits) + 1)]


def _minmax_values(_: str, hits: RankedList) -> list[float]:
    scores = [score for _, score in hits]
    low, high = min(scores), max(scores)
    return [1.0 if high == low else (s - low) / (high - low) for s in scores]


def _dbsf_values(sigmas: float) -> Values:
    def normalise(_: str, hits: RankedList) -> list[float]:
        scores = [score for _, score in hits]
        if len(scores) == 1:
            return [0.5]
        mean = sum(scores) / len(scores)
        std = math.sqrt(sum((s - mean) ** 2 for s in scores) / (len(scores) - 1))
        if std == 0:
            return [0.5] * len(scores)
        low = mean - sigmas * std
        return [(s - low) / (2 * sigmas * std) for s in scores]

    return normalise


def _method_values(method: FusionMethod, k: int) -> Values:
    if method == "rrf":
        return _rrf_values(k)
    if method == "weighted":
        return _minmax_values
    if method == "dbsf":
        return _dbsf_values(DBSF_SIGMAS)
    raise ValueError(f"unknown fusion method {method!r}")


def rrf(
    ranked: Mapping[str, RankedList], k: int = RRF_K, weights: Mapping[str, float] | None = None
) -> Fused:
    """Reciprocal rank fusion: ``score(d) = sum_s w_s / (k + rank_s(d))``, ranks from 1.

    Cormack's definition (as OpenSearch and Elasticsearch use it). Qdrant's RRF computes
    ``1 / (rank / w + k - 1)``: unweighted, its ``k`` is this ``k + 1``; its weights scale the
    rank, these scale the contribution.

    Uses ranks only, so lists with incomparable scores (BM25 vs cosine) combine safely.
    """
    return _accumulate(ranked, weights, _rrf_values(k))


def weighted_minmax(
    ranked: Mapping[str, RankedList], weights: Mapping[str, float] | None = None
) -> Fused:
    """Weighted sum of min-max normalised scores: ``sum_s w_s * (x - min_s) / (max_s - min_s)``.

    Min and max are taken over each returned list; a list whose scores are all equal
    normalises to 1.0 for every item.
    """
    return _accumulate(ranked, weights, _minmax_values)


def dbsf(
    ranked: Mapping[str, RankedList],
    weights: Mapping[str, float] | None = None,
    sigmas: float = DBSF_SIGMAS,
) -> Fused:
    """Distribution-based score fusion: each list's scores are mapped by
    ``(x - (mean - sigmas*std)) / (2*sigmas*std)`` (sample std, n - 1, over the list), then
    weighted and summed. No clipping: an outlier above mean + 3 std keeps its lead. A list of
    one item, or with zero spread, maps every item to 0.5. This is Qdrant's DBSF exactly
    (tests/serve_app/test_fusion_congruence.py), so fused rankings agree across backends.
    """
    return _accumulate(ranked, weights, _dbsf_values(sigmas))


def fuse(
    method: FusionMethod,
    ranked: Mapping[str, RankedList],
    k: int = RRF_K,
    weights: Mapping[str, float] | None = None,
) -> Fused:
    """Dispatch by method name (``rrf``, ``weighted``, ``dbsf``)."""
    return _accumulate(ranked, weights, _method_values(method, k))


def contributions(
    method: FusionMethod,
    ranked: Mapping[str, RankedList],
    ids: Iterable[str],
    k: int = RRF_K,
    weights: Mapping[str, float] | None = None,
) -> dict[str, dict[str, float]]:
    """``{id: {strategy: share}}`` for ``ids``: what each list added to the id's fused score
    under ``fuse`` with the same arguments (the shares of an id sum to its fused score; a list
    that did not return it, or weighs 0, adds nothing and is left out)."""
    wanted = set(ids)
    values = _method_values(method, k)
    shares: dict[str, dict[str, float]] = {doc: {} for doc in wanted}
    for strategy in sorted(ranked):
        hits = ranked[strategy]
        weight = _weight(weights, strategy)
        if weight == 0 or not hits:
            continue
        for (doc, _), value in zip(hits, values(strategy, hits), strict=True):
            if doc in wanted:
                shares[doc][strategy] = shares[doc].get(strategy, 0.0) + weight * value
    return shares
