"""``serve-app collections``: the HTTP API's collection operations, on the stores here (no
model loaded) or through ``--url``."""

from __future__ import annotations

import argparse
import json

from serve_app.cli.common import collection_service, service_arguments, through
from serve_app.client import collection_resource
from serve_app.config import AppConfig
from serve_app.errors import InvalidInputError
from serve_app.stores.base import ScopeKey


def add_parser(sub: argparse._SubParsersAction) -> None:
    collections = sub.add_parser("collections", help="list, create or delete named collections")
    collections.add_argument("action", choices=["list", "create", "delete"])
    collections.add_argument("name", nargs="?")
    collections.add_argument("--tenant", default="default")
    service_arguments(collections)


async def run(config: AppConfig, args: argparse.Namespace) -> int:
    if args.action != "list" and not args.name:
        raise InvalidInputError(f"collections {args.action} needs a NAME")
    if args.url:
        calls = {
            "list": ("GET", "/v1/collections", None),
            "create": ("POST", "/v1/collections", {"name": args.name}),
            "delete": ("DELETE", collection_resource(args.name), None),
        }
        answer = await through(args, *calls[args.action])
    else:
        async with collection_service(config) as service:
            if args.action == "list":
                answer = {"collections": await service.list_collections(ScopeKey(args.tenant))}
            elif args.action == "create":
                answer = await service.create_collection(ScopeKey(args.tenant, args.name))
            else:
                removed = await service.delete_collection(ScopeKey(args.tenant, args.name))
                answer = {"deleted": args.name, "chunks_removed": removed}
    print(json.dumps(answer, indent=2, default=str))
    return 0
