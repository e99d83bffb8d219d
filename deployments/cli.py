"""The ``serve-app`` console script: serve_app's commands plus ``serve`` (Ray Serve)."""

from __future__ import annotations

import argparse
import sys

from serve_app import cli as core


def _serve(config, args: argparse.Namespace) -> int:
    from deployments.local import existing, serve_forever

    serve = config.serve.model_copy(update={"port": args.port, "host": args.host})
    config = config.model_copy(update={"serve": serve})
    return serve_forever(config, existing(args.ingest) if args.ingest else None)


def build_parser() -> argparse.ArgumentParser:
    parser = core.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = sub.add_parser("serve", help="run the Ray Serve application locally (CPU)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--ingest", nargs="*", help="files or folders to index once the app is up")
    return parser


def main(argv: list[str] | None = None) -> int:
    return core.main(argv, parser=build_parser(), commands={**core.COMMANDS, "serve": _serve})


if __name__ == "__main__":
    sys.exit(main())
