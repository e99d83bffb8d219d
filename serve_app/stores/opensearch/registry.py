"""The collection registry of the OpenSearch backend: an index of its own beside the alias,
one document per (tenant, collection), created with OpenSearch's create-once."""

from __future__ import annotations

import uuid
from typing import Any

from opensearchpy.exceptions import ConflictError as OpenSearchConflict
from opensearchpy.exceptions import NotFoundError as OpenSearchNotFound
from opensearchpy.exceptions import TransportError

from serve_app.stores.opensearch import bodies
from serve_app.stores.opensearch.connection import OpenSearchConnection, OpenSearchStoreError
from serve_app.stores.registry import registry_fields

_REGISTRY_PAGE = 1000

_ABSENT = object()

_TAKEN = object()


class OpenSearchRegistry:
    """The named collections (``ChunkBackend``'s registry operations)."""

    def __init__(self, conn: OpenSearchConnection) -> None:
        self.conn = conn

    async def open_registry(self) -> None:
        if not await self.conn._call(
            "registry lookup", self.conn.client.indices.exists(index=self.conn.registry_index)
        ):
            await self._registry_call("creation", self._create_registry())

    async def _create_registry(self) -> None:
        try:
            await self.conn.client.indices.create(
                index=self.conn.registry_index, body=bodies.registry_body(self.conn.config)
            )
        except TransportError as error:
            if error.error != "resource_already_exists_exception":
                raise

    async def _registry_call(self, what: str, coro: Any) -> Any:
        """The call's answer; ``_ABSENT`` for a 404 (no such record, or no registry index
        yet: an index opened by an earlier version), ``_TAKEN`` for a 409."""

        async def answer() -> Any:
            try:
                return await coro
            except OpenSearchNotFound:
                return _ABSENT
            except OpenSearchConflict:
                return _TAKEN

        return await self.conn._call(f"registry {what}", answer())

    async def registry_records(self, tenant_id: str | None) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            body = bodies.registry_page(tenant_id, after, _REGISTRY_PAGE)
            response = await self._registry_call(
                "read", self.conn.client.search(index=self.conn.registry_index, body=body)
            )
            if response is _ABSENT:
                return []
            hits = response["hits"]["hits"]
            records += [registry_fields(hit["_source"]) for hit in hits]
            if len(hits) < _REGISTRY_PAGE:
                return records
            after = hits[-1]["_source"]["key"]

    async def registry_record(self, key: str) -> dict[str, Any] | None:
        # A GET by id is real-time: it sees the latest write, refreshed or not.
        found = await self._registry_call(
            "read", self.conn.client.get(index=self.conn.registry_index, id=key)
        )
        return None if found is _ABSENT else registry_fields(found["_source"])

    async def insert_registry_record(self, key: str, record: dict[str, Any]) -> bool:
        # op_type=create: OpenSearch's atomic create-once (409 when the id exists). The
        # client retries a request that timed out, and the retry of a create that had
        # succeeded answers 409 too: whose record it is, is read from its claim.
        # refresh: the next listing (a search) sees it.
        claim = uuid.uuid4().hex
        body = {"key": key, "claim": claim, **registry_fields(record)}
        created = await self._registry_call(
            "write",
            self.conn.client.create(
                index=self.conn.registry_index, id=key, body=body, refresh="true"
            ),
        )
        if created is _ABSENT:
            raise OpenSearchStoreError(f"no registry index {self.conn.registry_index} (removed?)")
        if created is not _TAKEN:
            return True
        held = await self._registry_call(
            "read", self.conn.client.get(index=self.conn.registry_index, id=key)
        )
        return held is not _ABSENT and held["_source"].get("claim") == claim

    async def update_registry_record(self, key: str, fields: dict[str, Any]) -> bool:
        # A partial update of an absent document is refused (404), never an insert;
        # concurrent updates of one record are retried by OpenSearch, not answered 409.
        updated = await self._registry_call(
            "write",
            self.conn.client.update(
                index=self.conn.registry_index,
                id=key,
                body={"doc": registry_fields(fields)},
                refresh="true",
                retry_on_conflict=3,
            ),
        )
        return updated is not _ABSENT

    async def drop_registry_record(self, key: str) -> None:
        await self._registry_call(
            "write", self.conn.client.delete(index=self.conn.registry_index, id=key, refresh="true")
        )
