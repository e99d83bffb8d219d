"""Chunk writes, deletes and reads of the Qdrant backend: upserts in bounded batches,
deletes by filter, scrolls and retrieves by id."""

from __future__ import annotations

from typing import Any

from qdrant_client import models as qm

from serve_app.schemas import Chunk, ScopeKey
from serve_app.stores import qdrant_requests as qr
from serve_app.stores.payloads import HEAD_FIELDS, states_from_payloads
from serve_app.stores.qdrant.connection import QdrantConnection
from serve_app.stores.qdrant.filters import to_client_filter
from serve_app.stores.scope import SCOPE_FIELDS, in_scope
from serve_app.stores.values import DocumentStates, DocumentWrite

_SCROLL_PAGE = 1000


class QdrantChunks:
    """The chunks in the collection behind the alias."""

    def __init__(self, conn: QdrantConnection) -> None:
        self.conn = conn

    # -- writes --------------------------------------------------------------------------
    def _point(self, scope: ScopeKey, write: DocumentWrite, encoded: Any) -> qm.PointStruct:
        vectors: dict[str, Any] = {
            name: qm.SparseVector(indices=value[0], values=value[1])
            if isinstance(value, tuple)
            else value
            for name, value in qr.point_vectors(encoded, self.conn.strategies).items()
        }
        return qm.PointStruct(
            id=encoded.chunk.id, vector=vectors, payload=qr.point_payload(scope, write, encoded)
        )

    async def upsert(self, scope: ScopeKey, writes: list[DocumentWrite]) -> None:
        points = [self._point(scope, w, e) for w in writes for e in w.chunks]
        size = self.conn.config.upsert_batch_size
        for start in range(0, len(points), size):
            await self.conn._call(
                "write",
                self.conn.client.upsert(
                    self.conn.alias, points=points[start : start + size], wait=True
                ),
            )

    async def _delete_where(self, what: str, selector: qm.Filter) -> int:
        count = (
            await self.conn._call(
                what, self.conn.client.count(self.conn.alias, count_filter=selector, exact=True)
            )
        ).count
        if count:
            await self.conn._call(
                what,
                self.conn.client.delete(
                    self.conn.alias, points_selector=qm.FilterSelector(filter=selector), wait=True
                ),
            )
        return int(count)

    async def delete_ids(self, scope: ScopeKey, chunk_ids: list[str]) -> None:
        selector = to_client_filter(qr.chunk_filter(scope))
        selector.must = [*(selector.must or []), qm.HasIdCondition(has_id=list(chunk_ids))]
        await self._delete_where("delete", selector)

    async def delete_documents(self, scope: ScopeKey, doc_ids: list[str]) -> int:
        return await self._delete_where(
            "delete", to_client_filter(qr.chunk_filter(scope, doc_ids=doc_ids))
        )

    async def delete_scope(self, scope: ScopeKey) -> int:
        return await self._delete_where("delete", to_client_filter(qr.chunk_filter(scope)))

    # -- reads ---------------------------------------------------------------------------
    async def _scroll(
        self,
        selector: qr.Filter,
        fields: list[str] | bool,
        offset: Any = None,
        pages: int = 0,
        page_size: int = _SCROLL_PAGE,
    ) -> tuple[list[qm.Record], Any]:
        records: list[qm.Record] = []
        done = 0
        while True:
            page, offset = await self.conn._call(
                "scroll",
                self.conn.client.scroll(
                    self.conn.alias,
                    scroll_filter=to_client_filter(selector),
                    limit=page_size,
                    offset=offset,
                    with_payload=fields,
                    with_vectors=False,
                ),
            )
            records.extend(page)
            done += 1
            if offset is None or not page or done == pages:
                return records, offset

    async def chunk_ids(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, set[str]]:
        if not doc_ids:
            return {}
        records, _ = await self._scroll(qr.chunk_filter(scope, doc_ids=doc_ids), ["doc_id"])
        held: dict[str, set[str]] = {}
        for record in records:
            held.setdefault((record.payload or {})["doc_id"], set()).add(str(record.id))
        return held

    async def document_states(self, scope: ScopeKey, doc_ids: list[str]) -> DocumentStates:
        if not doc_ids:
            return {}
        records, _ = await self._scroll(
            qr.chunk_filter(scope, doc_ids=doc_ids), ["doc_id", "content_hash", "chunk_count"]
        )
        return states_from_payloads([r.payload or {} for r in records])

    async def document_payloads(self, scope: ScopeKey, doc_id: str) -> list[dict[str, Any]]:
        records, _ = await self._scroll(qr.chunk_filter(scope, doc_ids=[doc_id]), True)
        return [{**(r.payload or {}), "id": str(r.id)} for r in records]

    async def document_heads(
        self, scope: ScopeKey, cursor: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        records, after = await self._scroll(
            qr.chunk_filter(scope, heads=True), HEAD_FIELDS, cursor, 1, limit
        )
        return [r.payload or {} for r in records], None if after is None else str(after)

    async def _retrieve(
        self, requests: list[tuple[ScopeKey, list[str]]], fields: list[str] | bool
    ) -> list[dict[str, dict[str, Any]]]:
        wanted = list(dict.fromkeys(i for _, ids in requests for i in ids))
        if not wanted:
            return [{} for _ in requests]
        records = await self.conn._call(
            "fetch",
            self.conn.client.retrieve(
                self.conn.alias, ids=wanted, with_payload=fields, with_vectors=False
            ),
        )
        by_id = {str(r.id): r.payload or {} for r in records}
        return [
            {i: by_id[i] for i in ids if i in by_id and in_scope(by_id[i], key)}
            for key, ids in requests
        ]

    async def present(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[set[str]]:
        return [set(found) for found in await self._retrieve(requests, SCOPE_FIELDS)]

    async def chunks(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[dict[str, Chunk]]:
        found = await self._retrieve(requests, True)
        return [{i: qr.payload_to_chunk(p) for i, p in f.items()} for f in found]

    async def count(self, scope: ScopeKey | None) -> int:
        selector = to_client_filter(qr.chunk_filter(scope)) if scope else None
        response = await self.conn._call(
            "count", self.conn.client.count(self.conn.alias, count_filter=selector, exact=True)
        )
        return int(response.count)

    async def scroll_payloads(
        self, scope: ScopeKey | None, fields: list[str] | None, offset: Any, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], Any]:
        records, offset = await self._scroll(
            qr.chunk_filter(scope), fields if fields is not None else True, offset, 1, limit
        )
        return [(str(r.id), r.payload or {}) for r in records], offset
