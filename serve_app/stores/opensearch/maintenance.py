"""What the OpenSearch backend reports of itself (``describe``) and its snapshots (the
``Snapshots`` protocol, in a repository registered in OpenSearch)."""

from __future__ import annotations

from typing import Any

from opensearchpy.exceptions import TransportError

from serve_app.errors import ConfigError
from serve_app.stores.opensearch import bodies
from serve_app.stores.opensearch.chunks import OpenSearchChunks
from serve_app.stores.opensearch.connection import OpenSearchConnection
from serve_app.stores.versioning import versioned_names


class OpenSearchMaintenance:
    """Inspection (which counts the chunks) and snapshots of the index and its registry."""

    def __init__(self, conn: OpenSearchConnection, chunks: OpenSearchChunks) -> None:
        self.conn = conn
        self.chunks = chunks  # describe counts the chunks

    async def describe(self) -> dict[str, Any]:
        physical = await self.conn._call("alias lookup", self.conn.alias_target())
        versions = versioned_names(
            self.conn.alias, await self.conn._call("listing", self.conn.version_names())
        )
        mapping = await self.conn._call(
            "mapping read", self.conn.client.indices.get_mapping(index=self.conn.alias)
        )
        mappings = next(iter(mapping.values()))["mappings"]
        count = await self.chunks.count(None)
        disk = None
        try:
            stats = await self.conn.client.indices.stats(index=self.conn.alias, metric="store")
            disk = int(stats["_all"]["primaries"]["store"]["size_in_bytes"])
        except (TransportError, KeyError, TypeError, ValueError):
            pass  # some deployments do not expose index stats to this user
        meta = mappings.get("_meta", {})
        return {
            "store": self.conn.name,
            "location": ", ".join(self.conn.config.hosts),
            "alias": self.conn.alias,
            "physical": physical,
            "versions": versions,
            "binding": meta.get("models"),
            "mapping_version": meta.get("mapping_version"),
            "points": count,
            "payload_indexes": bodies.indexed_fields(mappings.get("properties", {})),
            "disk_bytes": disk,
        }

    # -- snapshots (Snapshots protocol) ----------------------------------------------------
    def _repository(self) -> str:
        if not self.conn.config.snapshot_repository:
            raise ConfigError(
                "stores.opensearch.snapshot_repository is not set (register a snapshot "
                "repository in OpenSearch and name it there)"
            )
        return self.conn.config.snapshot_repository

    async def _snapshot_indices(self) -> list[str]:
        """The chunk index and, where it exists, the registry: a snapshot restores both."""
        indices = [self.conn.physical or self.conn.alias]
        if await self.conn._call(
            "registry lookup", self.conn.client.indices.exists(index=self.conn.registry_index)
        ):
            indices.append(self.conn.registry_index)
        return indices

    async def create_snapshot(self, name: str) -> dict[str, Any]:
        repository = self._repository()
        response = await self.conn._call(
            "snapshot creation",
            self.conn.client.snapshot.create(
                repository=repository,
                snapshot=name,
                body=bodies.snapshot_body(await self._snapshot_indices()),
                wait_for_completion=True,
            ),
        )
        snapshot = response.get("snapshot", {})
        return {"store": "opensearch", "name": name, "state": snapshot.get("state")}

    async def list_snapshots(self) -> list[dict[str, Any]]:
        repository = self._repository()
        response = await self.conn._call(
            "snapshot listing",
            self.conn.client.snapshot.get(repository=repository, snapshot="_all"),
        )
        return [
            {"store": "opensearch", "name": s["snapshot"], "state": s.get("state")}
            for s in response.get("snapshots", [])
        ]
