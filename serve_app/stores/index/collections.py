"""The named collections of every topology (``CollectionRegistry``): records in the chunk
store's registry, created ``creating`` and deleted ``deleting`` first."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from serve_app.errors import ConflictError, InvalidInputError, NotFoundError
from serve_app.schemas import DEFAULT_COLLECTION, ScopeKey
from serve_app.stores.index.topology import Topology
from serve_app.stores.registry import registry_key

log = logging.getLogger(__name__)


class StoreCollections(Topology):
    """The collection registry across the topology."""

    async def _registry(self, tenant_id: str | None) -> dict[str, dict[str, dict[str, Any]]]:
        """tenant -> collection name -> record."""
        registry: dict[str, dict[str, dict[str, Any]]] = {}
        for record in await self.chunk_store.registry_records(tenant_id):
            registry.setdefault(record["tenant_id"], {})[record["name"]] = record
        return registry

    async def list_collections(self, tenant: ScopeKey) -> list[dict[str, Any]]:
        """The collections of ``tenant.tenant`` (``default`` always), oldest first."""
        named = (await self._registry(tenant.tenant)).get(tenant.tenant, {})
        found = [{"name": DEFAULT_COLLECTION, "created_at": None, "state": "ready"}]
        found += [
            {
                "name": name,
                "created_at": record.get("created_at"),
                "state": record.get("state", "ready"),
            }
            for name, record in sorted(
                named.items(), key=lambda item: (item[1].get("created_at") or "", item[0])
            )
        ]
        return found

    async def has_collection(self, key: ScopeKey) -> bool:
        if key.is_default:
            return True
        record = await self.chunk_store.registry_record(registry_key(key))
        return record is not None and record.get("state", "ready") == "ready"

    async def create_collection(self, key: ScopeKey) -> dict[str, Any]:
        """Register a collection; ConflictError when the tenant has it already (of
        concurrent creations of one name, through any store replica, exactly one succeeds).

        The record is created ``creating`` (it takes no writes yet), the scope is emptied,
        then it turns ``ready``: a write admitted just before an earlier collection of this
        name was deleted may have landed after that delete's sweep, and must not reappear."""
        name = _one_collection(key)
        record_key = registry_key(key)
        created_at = datetime.now(UTC).isoformat(timespec="seconds")
        record = {
            "tenant_id": key.tenant,
            "name": name,
            "created_at": created_at,
            "state": "creating",
        }
        if key.is_default or not await self.chunk_store.insert_registry_record(record_key, record):
            held = None if key.is_default else await self.chunk_store.registry_record(record_key)
            state = "being deleted" if (held or {}).get("state") == "deleting" else "exists"
            raise ConflictError(f"collection {name!r} {state} already")
        leftovers = await asyncio.gather(*(b.delete_scope(key) for b in self.backends))
        if any(leftovers):
            log.warning("removed %d leftover chunks of %s", max(leftovers), key)
        if not await self.chunk_store.update_registry_record(record_key, {"state": "ready"}):
            raise ConflictError(f"collection {name!r} was deleted while it was being created")
        return {"name": name, "state": "ready", "created_at": created_at}

    async def delete_collection(self, key: ScopeKey) -> int:
        """Remove a collection's chunks from every store, then the collection; returns the
        chunks removed (from the store holding the most). It is marked ``deleting`` first, so
        it takes no writes or searches meanwhile, and a failed delete is finished by a retry
        (as is a creation that died half-way: ``creating``)."""
        name = _one_collection(key)
        if key.is_default:
            raise InvalidInputError(
                "the default collection cannot be deleted; delete its documents instead"
            )
        record_key = registry_key(key)
        record = await self.chunk_store.registry_record(record_key)
        if (
            record is not None
            and record.get("state") != "deleting"
            and not await self.chunk_store.update_registry_record(record_key, {"state": "deleting"})
        ):
            record = None  # dropped meanwhile by a delete through another replica
        if record is None:
            raise NotFoundError(f"collection {name!r} not found")
        removed = await asyncio.gather(*(b.delete_scope(key) for b in self.backends))
        await self.chunk_store.drop_registry_record(record_key)
        return max(removed, default=0)


def _one_collection(key: ScopeKey) -> str:
    if key.collection is None:
        raise InvalidInputError(f"{key} names every collection of its tenant, not one")
    return key.collection
