"""serve-app: ingest files, search, answer, evaluate and look after the stores, in process or
through a running service (--url)."""

# One module per command (``add_parser`` and ``run``); each calls the application service
# (serve_app.service) in process, or the HTTP API through --url: no use case is written here.

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from pydantic import ValidationError

from serve_app.cli import (
    answer,
    backup,
    collections,
    documents,
    evaluate,
    ingest,
    inspect,
    mcp,
    restore,
    search,
    snapshot,
    tune,
    validate,
)
from serve_app.cli.common import quiet_libraries
from serve_app.cli.terminal import neutral_output
from serve_app.config import AppConfig, load_config
from serve_app.errors import ServeAppError, describe_validation_errors
from serve_app.extras import require_extras

# In the order of ``serve-app --help``.
MODULES: dict[str, ModuleType] = {
    "ingest": ingest,
    "search": search,
    "answer": answer,
    "eval": evaluate,
    "tune": tune,
    "inspect": inspect,
    "validate": validate,
    "mcp": mcp,
    "collections": collections,
    "documents": documents,
    "snapshot": snapshot,
    "backup": backup,
    "restore": restore,
}
COMMANDS: dict[str, Callable[..., Any]] = {name: module.run for name, module in MODULES.items()}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="serve-app", description=__doc__)
    parser.add_argument(
        "--config", help="YAML config (default: $SERVE_APP_CONFIG or built-in defaults)"
    )
    parser.add_argument("--log-level", default="WARNING")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in MODULES.values():
        module.add_parser(sub)
    return parser


def main(
    argv: list[str] | None = None,
    parser: argparse.ArgumentParser | None = None,
    commands: dict[str, Any] | None = None,
) -> int:
    """Entry point; ``parser``/``commands`` let the Serve layer add its own subcommands."""
    commands = commands or COMMANDS
    for stream in (sys.stdout, sys.stderr):  # a line is seen when it is printed, piped or not
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    with neutral_output():
        return _run((parser or build_parser()).parse_args(argv), commands)


def _run(args: argparse.Namespace, commands: dict[str, Any]) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    quiet_libraries()
    try:
        config: AppConfig = load_config(args.config)
        require_extras(args.command, config, args)
        handler = commands[args.command]
        if asyncio.iscoroutinefunction(handler):
            return int(asyncio.run(handler(config, args)))
        return int(handler(config, args))
    except ServeAppError as error:
        print(f"error [{error.code}]: {error.message}", file=sys.stderr)
        return 2
    except ValidationError as error:
        print(
            f"error [INVALID_INPUT]: {describe_validation_errors(error.errors())}", file=sys.stderr
        )
        return 2
    except KeyboardInterrupt:
        return 130
