"""How a stored chunk's payload carries its scope (``serve_app.schemas.ScopeKey``)."""

from __future__ import annotations

from typing import Any

from serve_app.schemas import DEFAULT_COLLECTION, ScopeKey

SCOPE_FIELDS = ["tenant_id", "collection"]


def payload_scope(payload: dict[str, Any]) -> ScopeKey:
    """The scope key of a stored chunk's payload."""
    return ScopeKey(payload["tenant_id"], payload.get("collection") or DEFAULT_COLLECTION)


def in_scope(payload: dict[str, Any], key: ScopeKey) -> bool:
    if payload.get("tenant_id") != key.tenant:
        return False
    return (
        key.every_collection or (payload.get("collection") or DEFAULT_COLLECTION) == key.collection
    )


def scope_payload(key: ScopeKey) -> dict[str, str]:
    """The scope fields a stored chunk's payload carries (``SCOPE_FIELDS``): a chunk itself
    carries no tenancy, its store scope does."""
    if key.collection is None:
        raise ValueError(f"a chunk is written to one collection, not to {key}")
    return {"tenant_id": key.tenant, "collection": key.collection}
