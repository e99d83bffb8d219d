"""The collection registry of the embedded store: one file beside the shard
(``collections.json``), which one process holds."""

from __future__ import annotations

import json
from typing import Any

from serve_app.stores.embedded.layout import REGISTRY_FILE
from serve_app.stores.embedded.shard import EdgeShardOwner
from serve_app.stores.registry import registry_fields, registry_key
from serve_app.stores.scope import ScopeKey


class EdgeRegistry(EdgeShardOwner):
    """The named collections (``ChunkBackend``'s registry operations)."""

    # The registry: one file beside the shard, which one process holds. Each operation
    # reads, changes and replaces it with no await in between, so it is atomic in that
    # process; the file keeps the layout it always had ({"tenants": {tenant: {name: record}}}).
    # The registry: one file beside the shard, which one process holds. Each operation
    # reads, changes and replaces it with no await in between, so it is atomic in that
    # process; the file keeps the layout it always had ({"tenants": {tenant: {name: record}}}).
    def _load_registry(self) -> dict[str, Any]:
        path = self.path / REGISTRY_FILE
        return json.loads(path.read_text()) if path.exists() else {}

    def _save_registry(self, registry: dict[str, Any]) -> None:
        path = self.path / REGISTRY_FILE
        staged = path.with_suffix(".tmp")
        staged.write_text(json.dumps(registry, indent=2, sort_keys=True))
        staged.replace(path)  # atomic: a crash leaves the old registry or the new one

    def _records(self) -> dict[str, dict[str, Any]]:
        return {
            registry_key(ScopeKey(r["tenant_id"], r["name"])): r
            for r in _file_records(self._load_registry())
        }

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
        return [r for r in records if tenant_id is None or r["tenant_id"] == tenant_id]

    async def registry_record(self, key: str) -> dict[str, Any] | None:
        return self._records().get(key)

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


def _file_records(registry: dict[str, Any]) -> list[dict[str, Any]]:
    """The records of the registry file (``{"tenants": {tenant: {name: fields}}}``)."""
    return [
        registry_fields({**record, "tenant_id": tenant, "name": name})
        for tenant, names in registry.get("tenants", {}).items()
        for name, record in names.items()
    ]
