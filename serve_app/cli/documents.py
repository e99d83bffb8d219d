"""``serve-app documents``: a document's record (``get``) or its removal (``delete``), on the
stores here (no model loaded) or through ``--url``."""

from __future__ import annotations

import argparse

from serve_app.cli.common import collection_service, connected, printable, service_arguments
from serve_app.config import AppConfig
from serve_app.schemas import ScopeKey


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    documents = sub.add_parser("documents", help="a document's record, or delete it")
    documents.add_argument("action", choices=["get", "delete"])
    documents.add_argument("doc_id")
    documents.add_argument("--collection", default="default")
    documents.add_argument("--tenant", default="default")
    service_arguments(documents)


async def run(config: AppConfig, args: argparse.Namespace) -> int:
    answer: object
    if args.url:
        async with connected(args) as api:
            if args.action == "get":
                answer = await api.document(args.doc_id, args.collection)
            else:
                answer = await api.delete_document(args.doc_id, args.collection)
    else:
        async with collection_service(config) as service:
            key = await service.existing(ScopeKey(args.tenant, args.collection))
            if args.action == "get":
                info = await service.get_document(key, args.doc_id)
                answer = info.model_dump(mode="json")
            else:
                removed = await service.delete_document(key, args.doc_id)
                answer = {"deleted": args.doc_id, "chunks_removed": removed}
    print(printable(answer))
    return 0
