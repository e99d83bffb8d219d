"""``serve-app snapshot``: create or list the server stores' snapshots."""

from __future__ import annotations

import argparse
import json
import time

from serve_app.config import AppConfig


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    snapshot = sub.add_parser("snapshot", help="create or list store snapshots (server stores)")
    snapshot.add_argument("action", choices=["create", "list"])
    snapshot.add_argument("--name", help="snapshot name (default: serve-app-<UTC timestamp>)")


async def run(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.stores.base import TOPOLOGIES
    from serve_app.stores.index import StoreIndex

    index = TOPOLOGIES.create(config.stores.topology, config)
    assert isinstance(index, StoreIndex)
    try:
        stores = index.snapshot_stores()  # ConfigError when a store cannot snapshot itself
        if args.action == "create":
            name = args.name or time.strftime("serve-app-%Y%m%dt%H%M%Sz", time.gmtime())
            result = [await store.create_snapshot(name) for store in stores]
        else:
            result = [found for store in stores for found in await store.list_snapshots()]
    finally:
        await index.close()
    print(json.dumps(result, indent=2))
    return 0
