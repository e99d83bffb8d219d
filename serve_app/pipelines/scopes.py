"""The one rule for "does this collection exist for this tenant?", used by every door and
pipeline (the document and collection routes through ``CollectionService.existing``, a
search's batched retrieval, an answer's check): the tenant's ``default`` collection always
does, with no lookup; a named one when the collection registry holds it ready, each
distinct one looked up once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Protocol

from serve_app.errors import collection_not_found
from serve_app.schemas import DEFAULT_COLLECTION, ScopeKey


class KnowsCollections(Protocol):
    async def has_collection(self, key: ScopeKey) -> bool: ...


async def missing_collections(
    registry: KnowsCollections, keys: Iterable[ScopeKey]
) -> set[ScopeKey]:
    """Which of ``keys`` name a collection their tenant lacks."""
    named = list(dict.fromkeys(key for key in keys if not key.is_default))
    if not named:  # every search of the default collection: no lookup, no gather
        return set()
    found = await asyncio.gather(*(registry.has_collection(key) for key in named))
    return {key for key, ok in zip(named, found, strict=True) if not ok}


async def existing_collection(registry: KnowsCollections, key: ScopeKey) -> ScopeKey:
    """``key``, once its collection is known to exist; NotFoundError otherwise (another
    tenant's collection of the same name included: the key holds the tenant)."""
    if await missing_collections(registry, [key]):
        raise collection_not_found(key.collection or DEFAULT_COLLECTION)
    return key
