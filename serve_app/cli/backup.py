"""``serve-app backup``: the embedded index written to a tar file (the index must not be open)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from serve_app.config import AppConfig
from serve_app.errors import ConfigError


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    backup = sub.add_parser(
        "backup", help="write the embedded index to a tar file (the index must not be open)"
    )
    backup.add_argument("path", help="the backup file to create (e.g. backups/index.tar)")


def embedded_path(config: AppConfig, command: str) -> Path:
    if config.stores.topology != "embedded":
        raise ConfigError(
            f"{command} is for the embedded store; server stores take snapshots of their own "
            "(serve-app snapshot create|list)"
        )
    return config.data_path / config.stores.embedded.path


def run(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.stores.embedded_backup import backup

    print(json.dumps(backup(embedded_path(config, "backup"), Path(args.path)), indent=2))
    return 0
