"""The collection registry of the embedded store: one file beside the shard
(``collections.json``), which one process holds."""

from __future__ import annotations

import json
from typing import Any

from serve_app.schemas import ScopeKey
from serve_app.stores.embedded.layout import REGISTRY_FILE
from serve_app.stores.embedded.shard import EdgeShardOwner
from serve_app.stores.registry import registry_fields, registry_key


class EdgeRegistry:
    """The named collections (``ChunkBackend``'s registry operations)."""

    def __init__(self, conn: EdgeShardOwner) -> None:
        self.conn = conn

    # The registry: one file beside the shard, which one process holds. Each operation
    # reads, changes and replaces it with no await in between, so it is atomic in that
    # process; the file keeps the layout it always had ({"tenants": {tenant: {name: record}}}).
    # Its records are kept parsed, keyed by the file's stat (a write here replaces them; a
    # file replaced from outside, a restore, is seen by its new stat): a named-collection
    # request costs one stat, not a read and a parse of the whole file.
    _cached: tuple[tuple[int, int, int] | None, dict[str, dict[str, Any]]] | None = None

    def _load_registry(self) -> dict[str, Any]:
        path = self.conn.path / REGISTRY_FILE
        return json.loads(path.read_text()) if path.exists() else {}

    def _save_registry(self, registry: dict[str, Any]) -> None:
        path = self.conn.path / REGISTRY_FILE
        staged = path.with_suffix(".tmp")
        staged.write_text(json.dumps(registry, indent=2, sort_keys=True))
        staged.replace(path)  # atomic: a crash leaves the old registry or the new one
        self._cached = (self._registry_stamp(), _keyed(registry))

    def _registry_stamp(self) -> tuple[int, int, int] | None:
        try:
            found = (self.conn.path / REGISTRY_FILE).stat()
        except FileNotFoundError:
            return None
        return (found.st_ino, found.st_mtime_ns, found.st_size)

    def _records(self) -> dict[str, dict[str, Any]]:
        stamp = self._registry_stamp()
        if self._cached is None or self._cached[0] != stamp:
            self._cached = (stamp, _keyed(self._load_registry()))
        return self._cached[1]

    def _put_record(self, record: dict[str, Any] | None, key: str) -> None:
        registry = self._load_registry()
        tenants = registry.setdefault("tenants", {})
        for tenant, names in list(tenants.items()):
            for name in list(names):
                if registry_key(ScopeKey(tenant, name)) == key:
                    del names[name]
            if not names:
                del tenants[tenant]
        if record is not None:
            fields = {k: v for k, v in record.items() if k not in ("tenant_id", "name")}
            tenants.setdefault(record["tenant_id"], {})[record["name"]] = fields
        self._save_registry(registry)

    async def open_registry(self) -> None:
        return None  # the file is the registry, written on the first change

    async def registry_records(self, tenant_id: str | None) -> list[dict[str, Any]]:
        records = self._records().values()
        return [dict(r) for r in records if tenant_id is None or r["tenant_id"] == tenant_id]

    async def registry_record(self, key: str) -> dict[str, Any] | None:
        found = self._records().get(key)
        return None if found is None else dict(found)

    async def insert_registry_record(self, key: str, record: dict[str, Any]) -> bool:
        if key in self._records():
            return False
        self._put_record(record, key)
        return True

    async def update_registry_record(self, key: str, fields: dict[str, Any]) -> bool:
        held = self._records().get(key)
        if held is None:
            return False
        self._put_record({**held, **registry_fields(fields)}, key)
        return True

    async def drop_registry_record(self, key: str) -> None:
        self._put_record(None, key)


def _keyed(registry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {registry_key(ScopeKey(r["tenant_id"], r["name"])): r for r in _file_records(registry)}


def _file_records(registry: dict[str, Any]) -> list[dict[str, Any]]:
    """The records of the registry file (``{"tenants": {tenant: {name: fields}}}``)."""
    return [
        registry_fields({**record, "tenant_id": tenant, "name": name})
        for tenant, names in registry.get("tenants", {}).items()
        for name, record in names.items()
    ]
