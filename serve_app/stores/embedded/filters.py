"""The shared Qdrant requests (``stores/qdrant_requests.py``) in qdrant-edge's object model."""

from __future__ import annotations

from typing import Any

import qdrant_edge as edge

from serve_app.stores import qdrant_requests as qr


def _condition(condition: qr.Condition) -> edge.FieldCondition:
    key, value = condition.key, condition.value
    if isinstance(value, list):
        return edge.FieldCondition(key=key, match=edge.MatchAny(value))
    if isinstance(value, float):
        return edge.FieldCondition(key=key, range=edge.RangeFloat(gte=value, lte=value))
    return edge.FieldCondition(key=key, match=edge.MatchValue(value))


def to_edge_filter(spec: qr.Filter) -> edge.Filter:
    must_not: list[Any] | None = (
        [edge.HasIdCondition(set(spec.exclude_ids))] if spec.exclude_ids else None
    )
    return edge.Filter(must=[_condition(c) for c in spec.must], must_not=must_not)


def sparse_vector(indices: list[int], values: list[float]) -> edge.SparseVector:
    return edge.SparseVector(indices=indices, values=values)
