"""``serve-app collections``: the HTTP API's collection operations, on the stores here (no
model loaded) or through ``--url``."""

from __future__ import annotations

import argparse

from serve_app.cli.common import collection_service, connected, printable, service_arguments
from serve_app.config import AppConfig
from serve_app.errors import InvalidInputError
from serve_app.schemas import ScopeKey


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    collections = sub.add_parser("collections", help="list, create or delete named collections")
    collections.add_argument("action", choices=["list", "create", "delete"])
    collections.add_argument("name", nargs="?")
    collections.add_argument("--tenant", default="default")
    service_arguments(collections)


async def run(config: AppConfig, args: argparse.Namespace) -> int:
    if args.action != "list" and not args.name:
        raise InvalidInputError(f"collections {args.action} needs a NAME")
    answer: object
    if args.url:
        async with connected(args) as api:
            if args.action == "list":
                answer = await api.collections()
            elif args.action == "create":
                answer = await api.create_collection(args.name)
            else:
                answer = await api.delete_collection(args.name)
    else:
        async with collection_service(config) as service:
            if args.action == "list":
                answer = {"collections": await service.list_collections(ScopeKey(args.tenant))}
            elif args.action == "create":
                answer = await service.create_collection(ScopeKey(args.tenant, args.name))
            else:
                removed = await service.delete_collection(ScopeKey(args.tenant, args.name))
                answer = {"deleted": args.name, "chunks_removed": removed}
    print(printable(answer))
    return 0
