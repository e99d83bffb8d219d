"""``serve-app mcp``: the MCP server (stdio or streamable HTTP) over a running service's
HTTP API."""

from __future__ import annotations

import argparse
import os

from serve_app.config import AppConfig


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    arguments(
        sub.add_parser(
            "mcp", help="MCP server (stdio or streamable HTTP) over a running service's API"
        )
    )


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        default=os.environ.get("SERVE_APP_URL", "http://127.0.0.1:8000"),
        help="the service's base URL (default $SERVE_APP_URL or http://127.0.0.1:8000)",
    )
    parser.add_argument(
        "--api-key-env",
        default="SERVE_APP_API_KEY",
        help="environment variable holding the API key (default SERVE_APP_API_KEY)",
    )
    parser.add_argument("--timeout-s", type=float, default=60.0, help="bound of every tool call")
    parser.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="streamable HTTP bind address")
    parser.add_argument("--port", type=int, default=8765, help="streamable HTTP port")
    parser.add_argument(
        "--token-env",
        default="SERVE_APP_MCP_TOKEN",
        help="environment variable holding the bearer token streamable HTTP clients must "
        "send (required off loopback; default SERVE_APP_MCP_TOKEN)",
    )
    parser.add_argument(
        "--public-url", help="the URL clients reach the streamable HTTP server at (auth metadata)"
    )
    parser.add_argument(
        "--ingest-root",
        action="append",
        help="a folder whose files ingest(paths) may read (repeatable; default: the working "
        "directory over stdio, none over HTTP)",
    )
    parser.add_argument(
        "--max-file-bytes", type=int, default=20_000_000, help="largest file ingest(paths) reads"
    )


def run(config: AppConfig, args: argparse.Namespace) -> int:
    del config  # the MCP server talks to a running service over its HTTP API
    from serve_app import mcp_server

    return mcp_server.run(args)
