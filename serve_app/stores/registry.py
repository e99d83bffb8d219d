"""The registry of named collections, as every backend stores it: one record per (tenant,
collection) under a UUID key, beside the chunk index (not versioned, so a migration to a new
version keeps the collections)."""

from __future__ import annotations

import uuid
from typing import Any

from serve_app.schemas import ScopeKey

_REGISTRY_NAMESPACE = uuid.UUID("5b0f7c8e-2f4e-4d6a-9a51-6c0f2f3a9e11")

REGISTRY_RECORD_FIELDS = ("tenant_id", "name", "created_at", "state")


def registry_key(key: ScopeKey) -> str:
    """The id of a collection's registry record: a UUID, which every store takes as an id."""
    return str(uuid.uuid5(_REGISTRY_NAMESPACE, f"{key.tenant}\x00{key.collection}"))


def registry_fields(record: dict[str, Any]) -> dict[str, Any]:
    return {field: record[field] for field in REGISTRY_RECORD_FIELDS if field in record}


def registry_name(alias: str) -> str:
    """The index / collection beside ``alias`` holding the registry (not versioned: a
    migration to a new version keeps the collections)."""
    return f"{alias}-collections"
