"""The serving path's reads of every topology, once: batched search, batched fetch, document
hashes, info and list (a document is listed once all its chunks are in every store under one
hash, as ``document_hashes`` counts it). A chunk is served only when every store holds it (the final fetch asks every
store)."""

from __future__ import annotations

import asyncio

from serve_app.schemas import Chunk, DocumentInfo, DocumentPage, ScopeKey
from serve_app.stores.index.topology import Topology
from serve_app.stores.payloads import document_info_from, summary_from
from serve_app.stores.protocols import Backend
from serve_app.stores.values import Hit, SearchQuery, StrategyQuery


class StoreReads(Topology):
    """Batched search and fetch, document hashes and info across the topology."""

    async def document_hashes(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, str]:
        if not doc_ids:
            return {}
        states = await asyncio.gather(*(b.document_states(scope, doc_ids) for b in self.backends))
        complete: dict[str, str] = {}
        for doc in doc_ids:
            seen = [per[doc] for per in states if doc in per]
            whole = len(seen) == len(states) and all(stored == total for _, stored, total in seen)
            if whole and len({content_hash for content_hash, _, _ in seen}) == 1:
                complete[doc] = seen[0][0]
        return complete

    async def document_info(self, scope: ScopeKey, doc_id: str) -> DocumentInfo | None:
        payloads = await self.chunk_store.document_payloads(scope, doc_id)
        if len(self.backends) > 1 and payloads:
            ids = [p["id"] for p in payloads]
            present = await self._present_everywhere([(scope, ids)], skip=self.chunk_store)
            payloads = [p for p in payloads if p["id"] in present[0]]
        return document_info_from(scope, doc_id, payloads)

    async def list_documents(self, scope: ScopeKey, cursor: str | None, limit: int) -> DocumentPage:
        heads, after = await self.chunk_store.document_heads(scope, cursor, limit)
        whole = await self.document_hashes(scope, [h["doc_id"] for h in heads])
        listed = [summary_from(h) for h in heads if whole.get(h["doc_id"]) == h["content_hash"]]
        return DocumentPage(documents=listed, next_cursor=after)

    async def search_batch(self, queries: list[SearchQuery]) -> list[dict[str, list[Hit]]]:
        per_backend: dict[int, list[tuple[int, StrategyQuery]]] = {}
        for position, q in enumerate(queries):
            for strategy in q.strategies:
                backend = self._route.get(strategy)
                if backend is None:
                    raise ValueError(f"this topology does not serve the {strategy!r} strategy")
                one = StrategyQuery(strategy, q.query, q.limit, q.scope, q.filters, q.doc_ids)
                per_backend.setdefault(id(backend), []).append((position, one))
        backends = {id(b): b for b in self.backends}
        keys = list(per_backend)
        answers = await asyncio.gather(
            *(backends[k].query([one for _, one in per_backend[k]]) for k in keys)
        )
        results: list[dict[str, list[Hit]]] = [{s: [] for s in q.strategies} for q in queries]
        for key, hits_per_query in zip(keys, answers, strict=True):
            for (position, one), hits in zip(per_backend[key], hits_per_query, strict=True):
                results[position][one.strategy] = hits
        return results

    async def fetch_batch(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[list[Chunk]]:
        if not any(ids for _, ids in requests):
            return [[] for _ in requests]
        found, present = await asyncio.gather(
            self.chunk_store.chunks(requests),
            self._present_everywhere(requests, skip=self.chunk_store),
        )
        return [
            [chunks[i] for i in ids if i in chunks and i in everywhere]
            for (_, ids), chunks, everywhere in zip(requests, found, present, strict=True)
        ]

    async def _present_everywhere(
        self, requests: list[tuple[ScopeKey, list[str]]], skip: Backend | None = None
    ) -> list[set[str]]:
        """Per request: the ids every backend (but ``skip``) holds in its scope."""
        others = [b for b in self.backends if b is not skip]
        if not others:
            return [set(ids) for _, ids in requests]
        answers = await asyncio.gather(*(b.present(requests) for b in others))
        return [set.intersection(*(a[i] for a in answers)) for i in range(len(requests))]
