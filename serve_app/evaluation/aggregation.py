"""Chunk hits -> document ranking: how a document's chunk scores become its score.

``max``: a document ranks at its best chunk (its score). ``sum``: the sum of its ``n`` best
chunk scores (``n`` = 1 is ``max``). ``first``: only the document's first chunk counts (its
title and opening; the other chunks are dropped). Hits are (doc id, chunk order, score),
best first; the output is (doc id, score), best first, ties in the input order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

Aggregation = Literal["max", "sum", "first"]
AGGREGATIONS: tuple[Aggregation, ...] = ("max", "sum", "first")


def aggregate(
    hits: Iterable[tuple[str, int, float]], method: Aggregation = "max", n: int = 1
) -> list[tuple[str, float]]:
    """Documents ranked from their chunks' hits (see the module docstring)."""
    if method == "max" or (method == "sum" and n == 1):
        seen: dict[str, float] = {}
        for doc, _, score in hits:
            seen.setdefault(doc, score)
        return list(seen.items())
    if method == "first":
        return [(doc, score) for doc, order, score in hits if order == 0]
    if method != "sum":
        raise ValueError(f"unknown aggregation {method!r}")
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    for position, (doc, _, score) in enumerate(hits):
        if counts.get(doc, 0) >= n:
            continue
        totals[doc] = totals.get(doc, 0.0) + score
        counts[doc] = counts.get(doc, 0) + 1
        first_seen.setdefault(doc, position)
    return sorted(totals.items(), key=lambda item: (-item[1], first_seen[item[0]]))
