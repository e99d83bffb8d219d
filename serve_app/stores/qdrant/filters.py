"""The shared Qdrant filters (``stores/qdrant_requests.py``) in qdrant-client's models."""

from __future__ import annotations

from qdrant_client import models as qm

from serve_app.stores import qdrant_requests as qr


def _condition(condition: qr.Condition) -> qm.FieldCondition:
    key, value = condition.key, condition.value
    if isinstance(value, list):
        return qm.FieldCondition(key=key, match=qm.MatchAny(any=value))
    if isinstance(value, float):
        return qm.FieldCondition(key=key, range=qm.Range(gte=value, lte=value))
    return qm.FieldCondition(key=key, match=qm.MatchValue(value=value))


def to_client_filter(spec: qr.Filter) -> qm.Filter:
    must_not: list[qm.Condition] | None = (
        [qm.HasIdCondition(has_id=list(spec.exclude_ids))] if spec.exclude_ids else None
    )
    return qm.Filter(must=[_condition(c) for c in spec.must], must_not=must_not)
