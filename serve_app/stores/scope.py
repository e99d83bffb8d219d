"""What every store call is scoped by (``ScopeKey``) and how a stored chunk's payload
carries its scope."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serve_app.schemas import DEFAULT_COLLECTION, valid_collection_name, valid_tenant_id

SCOPE_FIELDS = ["tenant_id", "collection"]


@dataclass(frozen=True, slots=True)
class ScopeKey:
    """What every store call is scoped by: one tenant and one of its collections, or every
    collection of the tenant (``collection`` None; inspection only).

    A structured value, not a string convention: both parts are checked on construction
    (``valid_tenant_id``, ``valid_collection_name``), and nothing parses a string into a scope,
    so no string (a token claim ``tenA/proj``, say) can address another tenant's collection.
    """

    tenant: str
    collection: str | None = DEFAULT_COLLECTION

    def __post_init__(self) -> None:
        valid_tenant_id(self.tenant)
        if self.collection is not None:
            valid_collection_name(self.collection)

    @property
    def is_default(self) -> bool:
        """Whether this is the tenant's ``default`` collection, which every tenant has (the
        one place that rule is written)."""
        return self.collection == DEFAULT_COLLECTION

    @property
    def every_collection(self) -> bool:
        return self.collection is None

    def __str__(self) -> str:
        """For logs and the chunk-id owner (``chunking.base.chunk_id``): the tenant for its
        ``default`` collection, ``tenant/collection`` otherwise, ``tenant/*`` for all. Neither
        part can hold a ``/``, so the text is unambiguous; it is never parsed back."""
        if self.is_default:
            return self.tenant
        return f"{self.tenant}/{self.collection or '*'}"


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
