"""What the OpenSearch backend reports of itself (``describe``) and its snapshots (the
``Snapshots`` protocol, in a repository registered in OpenSearch)."""

from __future__ import annotations

from typing import Any

from opensearchpy.exceptions import TransportError

from serve_app.errors import ConfigError
from serve_app.stores.opensearch import bodies
from serve_app.stores.opensearch.chunks import OpenSearchChunks
from serve_app.stores.versioning import versioned_names


class OpenSearchMaintenance(OpenSearchChunks):
    """Inspection (which counts the chunks) and snapshots of the index and its registry."""

    async def describe(self) -> dict[str, Any]:
        physical = await self._call("alias lookup", self.alias_target())
        versions = versioned_names(self.alias, await self._call("listing", self.version_names()))
        mapping = await self._call(
            "mapping read", self.client.indices.get_mapping(index=self.alias)
        )
        mappings = next(iter(mapping.values()))["mappings"]
        count = await self.count(None)
        disk = None
        try:
            stats = await self.client.indices.stats(index=self.alias, metric="store")
            disk = int(stats["_all"]["primaries"]["store"]["size_in_bytes"])
        except (TransportError, KeyError, TypeError, ValueError):
            pass  # some deployments do not expose index stats to this user
        meta = mappings.get("_meta", {})
        return {
            "store": self.name,
            "location": ", ".join(self.config.hosts),
            "alias": self.alias,
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
        if not self.config.snapshot_repository:
            raise ConfigError(
                "stores.opensearch.snapshot_repository is not set (register a snapshot "
                "repository in OpenSearch and name it there)"
            )
        return self.config.snapshot_repository

    async def _snapshot_indices(self) -> list[str]:
        """The chunk index and, where it exists, the registry: a snapshot restores both."""
        indices = [self.physical or self.alias]
        if await self._call(
            "registry lookup", self.client.indices.exists(index=self.registry_index)
        ):
            indices.append(self.registry_index)
        return indices

    async def create_snapshot(self, name: str) -> dict[str, Any]:
        repository = self._repository()
        response = await self._call(
            "snapshot creation",
            self.client.snapshot.create(
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
        response = await self._call(
            "snapshot listing", self.client.snapshot.get(repository=repository, snapshot="_all")
        )
        return [
            {"store": "opensearch", "name": s["snapshot"], "state": s.get("state")}
            for s in response.get("snapshots", [])
        ]
