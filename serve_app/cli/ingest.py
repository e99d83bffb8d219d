"""``serve-app ingest``: index files or folders, in process or through ``--url``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from serve_app.cli.common import connected, progress, retrieval_service, service_arguments
from serve_app.config import AppConfig
from serve_app.errors import ServeAppError
from serve_app.schemas import ScopeKey


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
            errors.append(f"{path}: {error.code}: {error.message}")
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
    async with connected(args) as api:
        with progress(len(files), "upload", "file") as bar:
            totals = await api.upload_paths(
                files, args.collection, args.batch_size, on_batch=lambda g, _: bar.update(len(g))
            )
    print(
        f"files: {len(files)} uploaded to {args.url} ({len(totals.written)} written, "
        f"{len(totals.unchanged)} unchanged); chunks written: {totals.chunks_written}"
    )
    return 0
