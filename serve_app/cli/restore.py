"""``serve-app restore``: the embedded index restored from a backup (the index must not be open)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from serve_app.cli.backup import embedded_path
from serve_app.config import AppConfig


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    restore = sub.add_parser(
        "restore", help="restore the embedded index from a backup (the index must not be open)"
    )
    restore.add_argument("path", help="a file written by serve-app backup")
    restore.add_argument(
        "--replace", action="store_true", help="remove the index stores.embedded.path holds"
    )


def run(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.stores.embedded_backup import restore

    done = restore(Path(args.path), embedded_path(config, "restore"), replace=args.replace)
    print(json.dumps(done, indent=2))
    return 0
