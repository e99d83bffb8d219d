"""Chunk writes, deletes and reads of the embedded store. Writes and scrolls run in a worker
thread (writes serialise on the shard's write lock there); the search path's fetches
(``present``, ``chunks``) run inline on the caller's event loop, as its queries do
(``stores/embedded/queries.py`` says why)."""

from __future__ import annotations

import asyncio
from typing import Any

import qdrant_edge as edge

from serve_app.schemas import Chunk, ScopeKey
from serve_app.stores import qdrant_requests as qr
from serve_app.stores.embedded.filters import sparse_vector, to_edge_filter
from serve_app.stores.embedded.shard import EdgeShardOwner
from serve_app.stores.payloads import HEAD_FIELDS, states_from_payloads
from serve_app.stores.scope import SCOPE_FIELDS, in_scope
from serve_app.stores.values import DocumentStates, DocumentWrite

_SCROLL_PAGE = 1000


class EdgeChunks:
    """The chunks in the shard."""

    def __init__(self, conn: EdgeShardOwner) -> None:
        self.conn = conn

    # -- writes --------------------------------------------------------------------------
    def _upsert_sync(self, scope: ScopeKey, writes: list[DocumentWrite]) -> None:
        points = []
        for write in writes:
            for encoded in write.chunks:
                vectors = qr.point_vectors(encoded, self.conn.strategies)
                vector: dict[str, Any] = {
                    name: sparse_vector(*value) if isinstance(value, tuple) else value
                    for name, value in vectors.items()
                }
                points.append(
                    edge.Point(encoded.chunk.id, vector, qr.point_payload(scope, write, encoded))
                )
        if points:
            self.conn._update(edge.UpdateOperation.upsert_points(points))

    async def upsert(self, scope: ScopeKey, writes: list[DocumentWrite]) -> None:
        await asyncio.to_thread(self._upsert_sync, scope, writes)

    async def delete_ids(self, scope: ScopeKey, chunk_ids: list[str]) -> None:
        selector = qr.chunk_filter(scope)
        spec = edge.Filter(
            must=[edge.HasIdCondition(set(chunk_ids)), *(to_edge_filter(selector).must or [])]
        )
        await asyncio.to_thread(
            self.conn._update, edge.UpdateOperation.delete_points_by_filter(spec)
        )

    def _delete_documents_sync(self, scope: ScopeKey, doc_ids: list[str]) -> int:
        return self._delete_where_sync(qr.chunk_filter(scope, doc_ids=doc_ids))

    def _delete_where_sync(self, spec: qr.Filter) -> int:
        selector = to_edge_filter(spec)

        def delete(shard: edge.EdgeShard) -> int:
            count = shard.count(edge.CountRequest(exact=True, filter=selector))
            if count:
                shard.update(edge.UpdateOperation.delete_points_by_filter(selector))
            return count

        return int(self.conn._engine_write(delete))

    async def delete_documents(self, scope: ScopeKey, doc_ids: list[str]) -> int:
        return await asyncio.to_thread(self._delete_documents_sync, scope, doc_ids)

    async def delete_scope(self, scope: ScopeKey) -> int:
        return await asyncio.to_thread(self._delete_where_sync, qr.chunk_filter(scope))

    # -- reads ---------------------------------------------------------------------------
    def _scroll(
        self,
        selector: qr.Filter,
        fields: list[str] | None,
        offset: Any = None,
        pages: int = 0,
        page_size: int = _SCROLL_PAGE,
    ) -> tuple[list[tuple[str, dict[str, Any]]], Any]:
        """(id, payload) of every match, or of ``pages`` pages from ``offset``."""
        found: list[tuple[str, dict[str, Any]]] = []
        with_payload = edge.PayloadSelector.Include(fields) if fields else True
        done = 0
        while True:
            records, offset = self.conn.shard.scroll(
                edge.ScrollRequest(
                    offset=offset,
                    limit=page_size,
                    filter=to_edge_filter(selector),
                    with_payload=with_payload,
                )
            )
            found.extend((str(r.id), dict(r.payload or {})) for r in records)
            done += 1
            if offset is None or not records or done == pages:
                return found, offset

    def _chunk_ids_sync(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, set[str]]:
        held: dict[str, set[str]] = {}
        records, _ = self._scroll(qr.chunk_filter(scope, doc_ids=doc_ids), ["doc_id"])
        for chunk_id, payload in records:
            held.setdefault(payload["doc_id"], set()).add(chunk_id)
        return held

    async def chunk_ids(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, set[str]]:
        if not doc_ids:
            return {}
        return await asyncio.to_thread(self._chunk_ids_sync, scope, doc_ids)

    def _states_sync(self, scope: ScopeKey, doc_ids: list[str]) -> DocumentStates:
        records, _ = self._scroll(
            qr.chunk_filter(scope, doc_ids=doc_ids), ["doc_id", "content_hash", "chunk_count"]
        )
        return states_from_payloads([p for _, p in records])

    async def document_states(self, scope: ScopeKey, doc_ids: list[str]) -> DocumentStates:
        if not doc_ids:
            return {}
        return await asyncio.to_thread(self._states_sync, scope, doc_ids)

    async def document_payloads(self, scope: ScopeKey, doc_id: str) -> list[dict[str, Any]]:
        records, _ = await asyncio.to_thread(
            self._scroll, qr.chunk_filter(scope, doc_ids=[doc_id]), None
        )
        return [payload for _, payload in records]

    async def document_heads(
        self, scope: ScopeKey, cursor: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        records, after = await asyncio.to_thread(
            self._scroll, qr.chunk_filter(scope, heads=True), HEAD_FIELDS, cursor, 1, limit
        )
        return [payload for _, payload in records], None if after is None else str(after)

    def _retrieve_sync(
        self, requests: list[tuple[ScopeKey, list[str]]], fields: list[str] | bool
    ) -> list[dict[str, dict[str, Any]]]:
        wanted: list[Any] = list(dict.fromkeys(i for _, ids in requests for i in ids))
        if not wanted:
            return [{} for _ in requests]
        payload: Any = edge.PayloadSelector.Include(fields) if isinstance(fields, list) else True
        records = self.conn.shard.retrieve(wanted, with_payload=payload, with_vector=False)
        by_id = {self.conn._id_text(r.id): dict(r.payload or {}) for r in records}
        return [
            {i: by_id[i] for i in ids if i in by_id and in_scope(by_id[i], key)}
            for key, ids in requests
        ]

    async def present(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[set[str]]:
        found = self._retrieve_sync(requests, SCOPE_FIELDS)  # inline, as queries are
        return [set(f) for f in found]

    async def chunks(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[dict[str, Chunk]]:
        found = self._retrieve_sync(requests, True)  # inline, as queries are (embedded/queries.py)
        return [{i: qr.payload_to_chunk(p) for i, p in f.items()} for f in found]

    async def count(self, scope: ScopeKey | None) -> int:
        selector = to_edge_filter(qr.chunk_filter(scope)) if scope else None
        return await asyncio.to_thread(
            self.conn.shard.count, edge.CountRequest(exact=True, filter=selector)
        )

    async def scroll_payloads(
        self, scope: ScopeKey | None, fields: list[str] | None, offset: Any, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], Any]:
        return await asyncio.to_thread(
            self._scroll, qr.chunk_filter(scope), fields, offset, 1, limit
        )
