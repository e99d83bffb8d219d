"""What the embedded store reports of itself (``describe``). It has no snapshot API:
``serve-app backup`` / ``restore`` (``stores/embedded_backup.py``) copy its directory."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from serve_app.stores.disk import directory_bytes
from serve_app.stores.embedded.layout import META_FILE, SHARD_DIR
from serve_app.stores.embedded.shard import EdgeShardOwner


class EdgeMaintenance:
    """Inspection of the shard."""

    def __init__(self, conn: EdgeShardOwner) -> None:
        self.conn = conn

    def _describe_sync(self) -> dict[str, Any]:
        info = self.conn.shard.info()
        meta_path = self.conn.path / META_FILE
        return {
            "store": self.conn.name,
            "location": str(self.conn.path),
            "alias": None,
            "physical": SHARD_DIR,
            "versions": [SHARD_DIR],
            "binding": json.loads(meta_path.read_text()) if meta_path.exists() else None,
            "points": info.points_count,
            "segments": info.segments_count,
            "payload_indexes": {
                name: str(index.data_type).rsplit(".", 1)[-1].lower()
                for name, index in sorted(info.payload_schema.items())
            },
            "disk_bytes": directory_bytes(self.conn.path),
        }

    async def describe(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._describe_sync)
