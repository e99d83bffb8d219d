"""What the Qdrant backend reports of itself (``describe``) and its snapshots (the
``Snapshots`` protocol; a server only, local mode has none)."""

from __future__ import annotations

from typing import Any

from serve_app.errors import ConfigError
from serve_app.stores.disk import directory_bytes
from serve_app.stores.qdrant.connection import QdrantConnection, QdrantStoreError
from serve_app.stores.versioning import versioned_names


class QdrantMaintenance:
    """Inspection and snapshots of the collection behind the alias and its registry."""

    def __init__(self, conn: QdrantConnection) -> None:
        self.conn = conn

    async def describe(self) -> dict[str, Any]:
        physical = await self.conn._call("alias lookup", self.conn.alias_target())
        versions = versioned_names(
            self.conn.alias, await self.conn._call("listing", self.conn.version_names())
        )
        info = await self.conn._call(
            "collection info", self.conn.client.get_collection(self.conn.alias)
        )
        disk = None
        if self.conn.config.local_path and self.conn.config.local_path != ":memory:":
            disk = directory_bytes(self.conn.data_path / self.conn.config.local_path)
        return {
            "store": self.conn.name,
            "location": self.conn.config.url or f"local mode: {self.conn.config.local_path}",
            "alias": self.conn.alias,
            "physical": physical,
            "versions": versions,
            "binding": (info.config.metadata or {}).get("models"),
            "points": info.points_count,
            "status": str(info.status.value if hasattr(info.status, "value") else info.status),
            "vectors": sorted((info.config.params.vectors or {}).keys())
            + sorted((info.config.params.sparse_vectors or {}).keys()),
            "payload_indexes": {
                name: str(getattr(schema.data_type, "value", schema.data_type))
                for name, schema in sorted((info.payload_schema or {}).items())
            },
            "disk_bytes": disk,  # a server does not report it through the collection API
        }

    # -- snapshots (Snapshots protocol) ----------------------------------------------------
    async def _snapshot_target(self) -> str:
        """The physical collection behind the alias (snapshots belong to a collection)."""
        if self.conn.config.local_path:
            raise ConfigError("snapshots need a Qdrant server; qdrant-client local mode has none")
        if self.conn.physical is None:
            self.conn.physical = await self.conn._call("alias lookup", self.conn.alias_target())
        if self.conn.physical is None:
            raise QdrantStoreError(f"no Qdrant collection behind the alias {self.conn.alias}")
        return self.conn.physical

    async def _snapshot_collections(self) -> list[str]:
        """The chunk collection and, where it exists, the registry: restore both together."""
        collections = [await self._snapshot_target()]
        registry = self.conn.registry_collection
        if await self.conn._call("registry lookup", self.conn.client.collection_exists(registry)):
            collections.append(registry)
        return collections

    async def create_snapshot(self, name: str) -> dict[str, Any]:
        del name  # Qdrant names its snapshots itself
        collections = await self._snapshot_collections()
        taken = [
            await self.conn._call(
                "snapshot creation", self.conn.client.create_snapshot(c, wait=True)
            )
            for c in collections
        ]
        answer = {"store": "qdrant", "name": taken[0].name, "size": taken[0].size}
        if len(taken) > 1:
            answer["registry_snapshot"] = taken[1].name
        return answer

    async def list_snapshots(self) -> list[dict[str, Any]]:
        found = []
        for collection in await self._snapshot_collections():
            listed = await self.conn._call(
                "snapshot listing", self.conn.client.list_snapshots(collection)
            )
            found += [
                {"store": "qdrant", "collection": collection, "name": s.name, "size": s.size}
                for s in listed
            ]
        return found
