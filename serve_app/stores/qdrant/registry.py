"""The collection registry of the Qdrant backend: a collection of its own beside the alias,
one point per (tenant, collection), written with Qdrant's insert-only upsert."""

from __future__ import annotations

import re
import uuid
from typing import Any

from qdrant_client import models as qm
from qdrant_client.http.exceptions import UnexpectedResponse

from serve_app.errors import ConfigError
from serve_app.stores.qdrant.connection import QdrantConnection, already_exists
from serve_app.stores.registry import registry_fields

_REGISTRY_PAGE = 1000
_ABSENT = object()
_INSERT_ONLY_SINCE = (1, 17)
# The registry decides who created a collection: with replicated shards, its writes are
# ordered through the shard's leader and its reads ask every replica.
_STRONG = qm.WriteOrdering.STRONG
_ALL = qm.ReadConsistencyType.ALL


class QdrantRegistry:
    """The named collections (``ChunkBackend``'s registry operations)."""

    def __init__(self, conn: QdrantConnection) -> None:
        self.conn = conn

    async def _registry_call(self, what: str, coro: Any) -> Any:
        """The call's answer; ``_ABSENT`` when the point (set_payload) or the registry
        collection (an index opened by an earlier version) does not exist."""

        async def answer() -> Any:
            try:
                return await coro
            except UnexpectedResponse as error:
                if error.status_code == 404:
                    return _ABSENT
                raise
            except KeyError:  # local mode: no such point
                return _ABSENT
            except ValueError as error:  # local mode: no such collection
                if f"Collection {self.conn.registry_collection} not found" in str(error):
                    return _ABSENT
                raise

        return await self.conn._call(f"registry {what}", answer())

    async def open_registry(self) -> None:
        if not self.conn.config.local_path:
            await self._require_insert_only()
        name = self.conn.registry_collection
        if not await self.conn._call("registry lookup", self.conn.client.collection_exists(name)):
            await self.conn._call("registry creation", self._create_registry(name))

    async def _require_insert_only(self) -> None:
        """Refuse a server that would ignore ``update_mode`` (older than 1.17): there a
        second creation of a collection would overwrite its record, not be refused."""
        version = (await self.conn._call("version check", self.conn.client.info())).version
        numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:2])
        if numbers < _INSERT_ONLY_SINCE:
            raise ConfigError(
                f"Qdrant {version} is too old for the named-collection registry, which needs "
                "upsert's update_mode (Qdrant >= 1.17); upgrade the server"
            )

    async def _create_registry(self, name: str) -> None:
        try:  # points with a payload only: no vectors
            await self.conn.client.create_collection(
                name, vectors_config={}, replication_factor=self.conn.config.replication_factor
            )
        except (UnexpectedResponse, ValueError) as error:
            if not already_exists(error, name):
                raise
            return  # another replica created it meanwhile
        if not self.conn.config.local_path:  # listings filter on the tenant (strict mode: indexed)
            await self.conn.client.create_payload_index(
                name, "tenant_id", qm.PayloadSchemaType.KEYWORD
            )

    async def registry_records(self, tenant_id: str | None) -> list[dict[str, Any]]:
        selector = (
            qm.Filter(
                must=[qm.FieldCondition(key="tenant_id", match=qm.MatchValue(value=tenant_id))]
            )
            if tenant_id is not None
            else None
        )
        records: list[dict[str, Any]] = []
        offset: Any = None
        while True:
            page = await self._registry_call(
                "read",
                self.conn.client.scroll(
                    self.conn.registry_collection,
                    scroll_filter=selector,
                    limit=_REGISTRY_PAGE,
                    offset=offset,
                    with_payload=True,
                    consistency=_ALL,
                ),
            )
            if page is _ABSENT:
                return []
            points, offset = page
            records += [registry_fields(p.payload or {}) for p in points]
            if offset is None:
                return records

    async def _registry_payload(self, key: str) -> dict[str, Any] | None:
        found = await self._registry_call(
            "read",
            self.conn.client.retrieve(
                self.conn.registry_collection, ids=[key], with_payload=True, consistency=_ALL
            ),
        )
        return None if found is _ABSENT or not found else dict(found[0].payload or {})

    async def registry_record(self, key: str) -> dict[str, Any] | None:
        payload = await self._registry_payload(key)
        return None if payload is None else registry_fields(payload)

    async def insert_registry_record(self, key: str, record: dict[str, Any]) -> bool:
        # insert_only (Qdrant >= 1.17) leaves a point that exists as it is and reports success
        # either way: whether this call created it is read back from its claim.
        claim = uuid.uuid4().hex
        point = qm.PointStruct(
            id=key, vector={}, payload={**registry_fields(record), "claim": claim}
        )
        await self.conn._call(
            "registry write",
            self.conn.client.upsert(
                self.conn.registry_collection,
                [point],
                update_mode=qm.UpdateMode.INSERT_ONLY,
                ordering=_STRONG,
            ),
        )
        held = await self._registry_payload(key)
        return held is not None and held.get("claim") == claim

    async def update_registry_record(self, key: str, fields: dict[str, Any]) -> bool:
        # set_payload on an absent point is refused (404), never an insert; it merges, so
        # the creator's claim stays.
        updated = await self._registry_call(
            "write",
            self.conn.client.set_payload(
                self.conn.registry_collection,
                payload=registry_fields(fields),
                points=[key],
                ordering=_STRONG,
            ),
        )
        return updated is not _ABSENT

    async def drop_registry_record(self, key: str) -> None:
        await self._registry_call(
            "write",
            self.conn.client.delete(
                self.conn.registry_collection,
                points_selector=qm.PointIdsList(points=[key]),
                ordering=_STRONG,
            ),
        )
