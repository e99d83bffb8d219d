"""One query's reads (one strategy or several, one fetch) through the batched reads of
``ServingIndex``: what evaluation, benchmarks and tests call, in process or across the Ray
seam (which carries only the batched ones). ``StoreIndex``'s ``IndexMaintenance`` methods
are these."""

from __future__ import annotations

from typing import Protocol

from serve_app.schemas import Chunk, ScopeKey, SearchFilters, Strategy
from serve_app.stores.values import Hit, QueryVectors, SearchQuery


class BatchedReads(Protocol):
    """The two batched reads of ``ServingIndex``."""

    async def search_batch(self, queries: list[SearchQuery]) -> list[dict[str, list[Hit]]]: ...

    async def fetch_batch(
        self, requests: list[tuple[ScopeKey, list[str]]]
    ) -> list[list[Chunk]]: ...


async def search_many(
    store: BatchedReads,
    strategies: list[Strategy],
    vectors: QueryVectors,
    limit: int,
    scope: ScopeKey,
    filters: SearchFilters | None = None,
) -> dict[str, list[Hit]]:
    (result,) = await store.search_batch([SearchQuery(strategies, vectors, limit, scope, filters)])
    return result


async def search(
    store: BatchedReads,
    strategy: Strategy,
    vectors: QueryVectors,
    limit: int,
    scope: ScopeKey,
    filters: SearchFilters | None = None,
) -> list[Hit]:
    return (await search_many(store, [strategy], vectors, limit, scope, filters))[strategy]


async def fetch(store: BatchedReads, scope: ScopeKey, chunk_ids: list[str]) -> list[Chunk]:
    return (await store.fetch_batch([(scope, chunk_ids)]))[0]
