"""``serve-app documents``: a page of a collection's documents (``list``), a document's record
(``get``) or its removal (``delete``), on the stores here (no model loaded) or through
``--url``."""

from __future__ import annotations

import argparse

from serve_app.cli.common import collection_service, connected, printable, service_arguments
from serve_app.config import AppConfig
from serve_app.errors import InvalidInputError
from serve_app.schemas import ScopeKey


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    documents = sub.add_parser("documents", help="list documents, show or delete one")
    documents.add_argument("action", choices=["list", "get", "delete"])
    documents.add_argument("doc_id", nargs="?", help="the document (get, delete)")
    documents.add_argument("--limit", type=int, default=100, help="list: documents a page")
    documents.add_argument("--cursor", help="list: the previous page's next_cursor")
    documents.add_argument("--collection", default="default")
    documents.add_argument("--tenant", default="default")
    service_arguments(documents)


async def run(config: AppConfig, args: argparse.Namespace) -> int:
    answer: object
    if args.action != "list" and not args.doc_id:
        raise InvalidInputError(f"documents {args.action} needs a document id")
    if args.url:
        async with connected(args) as api:
            if args.action == "list":
                answer = await api.documents(args.collection, args.cursor, args.limit)
            elif args.action == "get":
                answer = await api.document(args.doc_id, args.collection)
            else:
                answer = await api.delete_document(args.doc_id, args.collection)
    else:
        async with collection_service(config) as service:
            key = await service.existing(ScopeKey(args.tenant, args.collection))
            if args.action == "list":
                answer = await service.list_documents(key, args.cursor, args.limit)
            elif args.action == "get":
                info = await service.get_document(key, args.doc_id)
                answer = info.model_dump(mode="json")
            else:
                removed = await service.delete_document(key, args.doc_id)
                answer = {"deleted": args.doc_id, "chunks_removed": removed}
    print(printable(answer))
    return 0
