"""Chunk writes, deletes and reads of the OpenSearch backend. Writes go through ``_bulk`` in
bounded batches; items that fail with a retryable status (429, 5xx) are retried with
exponential backoff, anything else fails the call with the item's reason."""

from __future__ import annotations

import asyncio
from typing import Any

from serve_app.schemas import Chunk, ScopeKey
from serve_app.stores.opensearch import bodies
from serve_app.stores.opensearch.connection import OpenSearchConnection, OpenSearchStoreError
from serve_app.stores.scope import SCOPE_FIELDS, in_scope
from serve_app.stores.values import DocumentStates, DocumentWrite

_RETRYABLE = {429, 500, 502, 503, 504}

_STORE_ONLY = (*SCOPE_FIELDS, "content_hash", "chunk_count", "splade", "body")

_MAX_WINDOW = 10_000

_PAGE = 1000


class OpenSearchChunks:
    """The chunks in the index behind the alias."""

    def __init__(self, conn: OpenSearchConnection) -> None:
        self.conn = conn

    # -- writes --------------------------------------------------------------------------
    async def _bulk(self, actions: list[tuple[str, dict[str, Any]]]) -> None:
        pending = actions
        for attempt in range(self.conn.config.max_retries + 1):
            body = bodies.bulk_index_actions(self.conn.alias, pending)
            response = await self.conn._call(
                "bulk indexing", self.conn.client.bulk(body=body, refresh=self.conn.config.refresh)
            )
            if not response.get("errors"):
                return
            retry: list[tuple[Any, Any]] = []
            fatal: list[tuple[Any, Any]] = []
            for item, action in zip(response["items"], pending, strict=True):
                result = next(iter(item.values()))
                status = int(result.get("status", 500))
                if status < 300:
                    continue
                (retry if status in _RETRYABLE else fatal).append((action, result))
            if fatal:
                (chunk_id, _), result = fatal[0]
                raise OpenSearchStoreError(
                    f"OpenSearch rejected chunk {chunk_id}: {result.get('error')} "
                    f"({len(fatal)} item(s) rejected)"
                )
            pending = [action for action, _ in retry]
            if not pending:
                return
            await asyncio.sleep(self.conn.config.retry_backoff_s * (2**attempt))
        raise OpenSearchStoreError(
            f"OpenSearch kept refusing {len(pending)} chunk(s) after "
            f"{self.conn.config.max_retries} retries"
        )

    async def upsert(self, scope: ScopeKey, writes: list[DocumentWrite]) -> None:
        actions = [
            (encoded.chunk.id, bodies.chunk_source(scope, write, i))
            for write in writes
            for i, encoded in enumerate(write.chunks)
        ]
        size = self.conn.config.bulk_batch_size
        for start in range(0, len(actions), size):
            await self._bulk(actions[start : start + size])

    async def _delete_where(self, body: dict[str, Any]) -> int:
        response = await self.conn._call(
            "delete by query",
            self.conn.client.delete_by_query(
                index=self.conn.alias, body=body, refresh=True, conflicts="proceed"
            ),
        )
        return int(response.get("deleted", 0))

    async def delete_ids(self, scope: ScopeKey, chunk_ids: list[str]) -> None:
        await self._delete_where(bodies.ids_query(scope, chunk_ids))

    async def delete_documents(self, scope: ScopeKey, doc_ids: list[str]) -> int:
        return await self._delete_where(bodies.documents_query(scope, doc_ids))

    async def delete_scope(self, scope: ScopeKey) -> int:
        return await self._delete_where(bodies.count_query(scope))

    # -- reads ---------------------------------------------------------------------------
    async def _sources(self, body: dict[str, Any], what: str) -> list[dict[str, Any]]:
        """Every hit of ``body`` (id and source), paged by ``search_after`` on the chunk id."""
        hits: list[dict[str, Any]] = []
        after: list[Any] | None = None
        while True:
            page_body = {**body, "size": _PAGE, "sort": ["id"]}
            if after is not None:
                page_body["search_after"] = after
            response = await self.conn._call(
                what, self.conn.client.search(index=self.conn.alias, body=page_body)
            )
            page = response["hits"]["hits"]
            hits.extend(page)
            if len(page) < _PAGE:
                return hits
            after = page[-1]["sort"]

    async def chunk_ids(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, set[str]]:
        if not doc_ids:
            return {}
        held: dict[str, set[str]] = {}
        body = {**bodies.documents_query(scope, doc_ids), "_source": ["doc_id"]}
        for hit in await self._sources(body, "chunk listing"):
            held.setdefault(hit["_source"]["doc_id"], set()).add(hit["_id"])
        return held

    async def document_states(self, scope: ScopeKey, doc_ids: list[str]) -> DocumentStates:
        """Only documents stored under exactly one hash."""
        if not doc_ids:
            return {}
        response = await self.conn._call(
            "document hashes",
            self.conn.client.search(
                index=self.conn.alias, body=bodies.hashes_query(scope, doc_ids)
            ),
        )
        states = {}
        for bucket in response["aggregations"]["docs"]["buckets"]:
            hashes = bucket["hashes"]["buckets"]
            if len(hashes) == 1:
                only = hashes[0]
                states[bucket["key"]] = (
                    only["key"],
                    int(only["doc_count"]),
                    int(only["expected"]["value"] or 0),
                )
        return states

    async def document_payloads(self, scope: ScopeKey, doc_id: str) -> list[dict[str, Any]]:
        response = await self.conn._call(
            "document lookup",
            self.conn.client.search(
                index=self.conn.alias, body=bodies.document_query(scope, doc_id, _MAX_WINDOW)
            ),
        )
        return [h["_source"] for h in response["hits"]["hits"]]

    async def document_heads(
        self, scope: ScopeKey, cursor: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        response = await self.conn._call(
            "listing",
            self.conn.client.search(
                index=self.conn.alias, body=bodies.heads_query(scope, cursor, limit)
            ),
        )
        hits = response["hits"]["hits"]
        after = hits[-1]["_id"] if len(hits) == limit else None
        return [h["_source"] for h in hits], after

    async def _mget(
        self, requests: list[tuple[ScopeKey, list[str]]], source: Any
    ) -> list[dict[str, dict[str, Any]]]:
        wanted = list(dict.fromkeys(i for _, ids in requests for i in ids))
        if not wanted:
            return [{} for _ in requests]
        response = await self.conn._call(
            "fetch", self.conn.client.mget(index=self.conn.alias, body={"ids": wanted}, **source)
        )
        by_id = {d["_id"]: d["_source"] for d in response["docs"] if d.get("found")}
        return [
            {i: by_id[i] for i in ids if i in by_id and in_scope(by_id[i], key)}
            for key, ids in requests
        ]

    async def present(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[set[str]]:
        found = await self._mget(requests, {"_source_includes": SCOPE_FIELDS})
        return [set(f) for f in found]

    async def chunks(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[dict[str, Chunk]]:
        found = await self._mget(requests, {"_source_excludes": ["splade", "body"]})
        return [{i: source_to_chunk(s) for i, s in f.items()} for f in found]

    async def count(self, scope: ScopeKey | None) -> int:
        response = await self.conn._call(
            "count", self.conn.client.count(index=self.conn.alias, body=bodies.count_query(scope))
        )
        return int(response["count"])

    async def scroll_payloads(
        self, scope: ScopeKey | None, fields: list[str] | None, offset: Any, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], Any]:
        body: dict[str, Any] = {
            **bodies.count_query(scope),
            "_source": fields if fields is not None else {"excludes": ["splade"]},
            "size": limit,
            "sort": ["id"],
        }
        if offset is not None:
            body["search_after"] = offset
        response = await self.conn._call(
            "listing", self.conn.client.search(index=self.conn.alias, body=body)
        )
        hits = response["hits"]["hits"]
        page = [(h["_id"], h["_source"]) for h in hits]
        return page, (hits[-1]["sort"] if len(hits) == limit else None)


def source_to_chunk(source: dict[str, Any]) -> Chunk:
    # Written from a validated Chunk by this adapter; trusted like the embedded payloads.
    data = {k: v for k, v in source.items() if k not in _STORE_ONLY}
    data["text"] = data.pop("content", "")
    return Chunk.model_construct(**data)
