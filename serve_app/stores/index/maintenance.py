"""Inspection, counts, the one-query reads that evaluation, benchmarks and tests use
(``IndexMaintenance``), and the topology's snapshot stores."""

from __future__ import annotations

import asyncio
from typing import Any

from serve_app.errors import ConfigError
from serve_app.schemas import Chunk, ScopeKey, SearchFilters, Strategy
from serve_app.stores import one_query
from serve_app.stores.index.collections import StoreCollections
from serve_app.stores.index.reads import StoreReads
from serve_app.stores.payloads import sample_payload
from serve_app.stores.protocols import Backend, Snapshots
from serve_app.stores.scope import SCOPE_FIELDS, payload_scope
from serve_app.stores.values import Hit, QueryVectors

_COUNT_PAGE = 1000


class StoreMaintenance(StoreReads, StoreCollections):
    """Maintenance over the topology's serving reads and its registry."""

    async def search(
        self,
        strategy: Strategy,
        query: QueryVectors,
        limit: int,
        scope: ScopeKey,
        filters: SearchFilters | None = None,
    ) -> list[Hit]:
        return await one_query.search(self, strategy, query, limit, scope, filters)

    async def search_many(
        self,
        strategies: list[Strategy],
        query: QueryVectors,
        limit: int,
        scope: ScopeKey,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[Hit]]:
        return await one_query.search_many(self, strategies, query, limit, scope, filters)

    async def fetch(self, scope: ScopeKey, chunk_ids: list[str]) -> list[Chunk]:
        return await one_query.fetch(self, scope, chunk_ids)

    async def count(self, scope: ScopeKey | None = None) -> int:
        if len(self.backends) == 1:
            return await self.backends[0].count(scope)
        # Chunks every store holds: page through one store's ids, confirm in the others.
        total, offset = 0, None
        while True:
            page, offset = await self.chunk_store.scroll_payloads(
                scope, SCOPE_FIELDS, offset, _COUNT_PAGE
            )
            by_scope: dict[ScopeKey, list[str]] = {}
            for chunk_id, payload in page:
                by_scope.setdefault(payload_scope(payload), []).append(chunk_id)
            if by_scope:
                present = await self._present_everywhere(
                    list(by_scope.items()), skip=self.chunk_store
                )
                total += sum(len(ids) for ids in present)
            if offset is None or not page:
                return total

    async def inspect(self, selector: ScopeKey | None = None) -> dict[str, Any]:
        """What every store holds: its own report (``Backend.describe``), and per (tenant,
        collection) the chunks and documents it holds, for every tenant (``selector`` None),
        one tenant's collections (``ScopeKey(tenant, None)``), or one collection. Pages
        through the payloads of the selection."""
        tenant_id = None if selector is None else selector.tenant
        collection = None if selector is None else selector.collection
        reports = await asyncio.gather(*(self._inspect_one(b, selector) for b in self.backends))
        registry = await self._registry(tenant_id)
        binding = reports[0][0].get("binding")
        per_scope: dict[ScopeKey, dict[str, Any]] = {}
        for backend, (_, tallies) in zip(self.backends, reports, strict=True):
            for key, (chunks, docs) in tallies.items():
                entry = per_scope.setdefault(key, {"chunks": {}, "documents": {}})
                entry["chunks"][backend.name] = chunks
                entry["documents"][backend.name] = len(docs)
        for tenant, names in registry.items():
            for name in names:  # registered collections with nothing in them yet
                key = ScopeKey(tenant, name)
                if (tenant_id is None or tenant == tenant_id) and collection in (None, name):
                    per_scope.setdefault(key, {"chunks": {}, "documents": {}})
        collections = []
        for key in sorted(per_scope, key=_scope_order):
            record = registry.get(key.tenant, {}).get(key.collection or "")
            collections.append(
                {
                    "tenant_id": key.tenant,
                    "collection": key.collection,
                    "state": (record or {}).get("state", "ready"),
                    "models": binding,
                    "chunks": {
                        b.name: per_scope[key]["chunks"].get(b.name, 0) for b in self.backends
                    },
                    "documents": {
                        b.name: per_scope[key]["documents"].get(b.name, 0) for b in self.backends
                    },
                }
            )
        return {
            "strategies": list(self.strategies),
            "stores": [report for report, _ in reports],
            "collections": collections,
        }

    async def _inspect_one(
        self, backend: Backend, selector: ScopeKey | None
    ) -> tuple[dict[str, Any], dict[ScopeKey, tuple[int, set[str]]]]:
        report = await backend.describe()
        report["strategies"] = list(backend.strategies)
        tallies: dict[ScopeKey, tuple[int, set[str]]] = {}
        offset = None
        while True:
            page, offset = await backend.scroll_payloads(
                selector, [*SCOPE_FIELDS, "doc_id"], offset, _COUNT_PAGE
            )
            for _, payload in page:
                chunks, docs = tallies.get(payload_scope(payload), (0, set()))
                docs.add(payload.get("doc_id", ""))
                tallies[payload_scope(payload)] = (chunks + 1, docs)
            if offset is None or not page:
                break
        sample, _ = await backend.scroll_payloads(selector, None, None, 1)
        report["payload_fields"] = sample_payload(sample[0][1]) if sample else {}
        return report, tallies

    def snapshot_stores(self) -> list[Snapshots]:
        """Every store, when each can snapshot itself; ConfigError otherwise."""
        stores = [b.snapshots for b in self.backends if b.snapshots is not None]
        if len(stores) != len(self.backends):
            names = [b.name for b in self.backends if b.snapshots is None]
            raise ConfigError(
                f"{', '.join(names)} has no snapshot API: stop the service and use "
                "serve-app backup / restore instead"
            )
        return stores


def _scope_order(key: ScopeKey) -> tuple[str, bool, str]:
    """Tenants in order, each one's ``default`` collection first."""
    return key.tenant, not key.is_default, key.collection or ""
