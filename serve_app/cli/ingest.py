"""``serve-app ingest``: index files or folders, in process or through ``--url``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from serve_app.cli.common import client, progress, retrieval_service, service_arguments
from serve_app.client import collection_path
from serve_app.config import AppConfig
from serve_app.errors import ServeAppError
from serve_app.stores.base import ScopeKey


def add_parser(sub: argparse._SubParsersAction) -> None:
    ingest = sub.add_parser("ingest", help="index files or folders (txt, md, html, JATS xml, pdf)")
    ingest.add_argument("paths", nargs="+")
    ingest.add_argument("--tenant", default="default")
    ingest.add_argument("--batch-size", type=int, default=16)
    ingest.add_argument("--skip-invalid", action="store_true")
    ingest.add_argument("--collection", default="default", help="a named collection")
    service_arguments(ingest)


async def run(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.loaders import iter_files, load_file

    files = list(iter_files(args.paths))
    if not files:
        raise ServeAppError("no supported files found in the given paths")
    if args.url:
        return await upload(args, files)
    documents, errors = [], []
    for path in files:
        try:
            loaded = load_file(
                path,
                max_chars=config.limits.max_document_chars,
                max_bytes=config.limits.max_file_bytes,
            )
            documents.append(loaded)
        except ServeAppError as error:
            errors.append(f"{error.code}: {error.message}")
    if errors and not args.skip_invalid:
        print("nothing was ingested; these files are invalid:", file=sys.stderr)
        for line in errors:
            print(f"  {line}", file=sys.stderr)
        print("(use --skip-invalid to ingest the valid files anyway)", file=sys.stderr)
        return 2
    for line in errors:
        print(f"skipped: {line}", file=sys.stderr)
    totals = {"written": 0, "unchanged": 0, "chunks": 0, "stale": 0}
    async with retrieval_service(config) as service:
        key = await service.existing(ScopeKey(args.tenant, args.collection))
        with progress(len(documents), "ingest", "doc") as bar:
            for start in range(0, len(documents), args.batch_size):
                batch = documents[start : start + args.batch_size]
                result = await service.ingest(key, batch)
                totals["written"] += len(result.written)
                totals["unchanged"] += len(result.unchanged)
                totals["chunks"] += result.chunks_written
                totals["stale"] += result.stale_chunks_removed
                bar.update(len(batch))
        count = await service.index.count(ScopeKey(args.tenant))
    print(
        f"documents: {len(documents)} ({totals['written']} written, {totals['unchanged']} unchanged)"
        f"; chunks written: {totals['chunks']}; stale chunks removed: {totals['stale']}"
        f"; chunks in index for tenant {args.tenant!r}: {count}"
    )
    return 0


async def upload(args: argparse.Namespace, files: list[Path]) -> int:
    """Upload the files to the running service at ``--url`` (it loads, chunks and encodes
    them), ``--batch-size`` files a request; the tenant is the credential's."""
    api = client(args)
    path = f"{collection_path(args.collection)}/documents"
    totals = {"written": 0, "unchanged": 0, "chunks": 0}
    try:
        with progress(len(files), "upload", "file") as bar:
            for start in range(0, len(files), args.batch_size):
                group = files[start : start + args.batch_size]
                parts = [
                    ("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in group
                ]
                answer = await api.call("POST", path, files=parts)
                totals["written"] += len(answer["written"])
                totals["unchanged"] += len(answer["unchanged"])
                totals["chunks"] += answer["chunks_written"]
                bar.update(len(group))
    finally:
        await api.close()
    print(
        f"files: {len(files)} uploaded to {args.url} ({totals['written']} written, "
        f"{totals['unchanged']} unchanged); chunks written: {totals['chunks']}"
    )
    return 0
