"""The ``serve-app`` console script: serve_app's commands plus ``serve`` (a local Ray Serve
run, ``deployments.local``) and ``cluster`` (a RayService on Kubernetes,
``deployments.cluster``)."""

from __future__ import annotations

import argparse
import sys

from serve_app import cli as core


def _serve(config, args: argparse.Namespace) -> int:
    from deployments.local.launcher import existing, serve_forever
    from deployments.settings import service_config

    served = service_config(config, "serve-app serve", port=args.port, host=args.host)
    return serve_forever(served, existing(args.ingest) if args.ingest else None)


def _cluster(_config, args: argparse.Namespace) -> int:
    from deployments.cluster import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = core.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = sub.add_parser("serve", help="run the Ray Serve application locally (CPU)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--ingest", nargs="*", help="files or folders to index once the app is up")

    cluster = sub.add_parser("cluster", help="RayService status on Kubernetes")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", required=True)
    for name, text in (
        ("status", "conditions, clusters, applications and deployments"),
        (
            "wait-ready",
            "wait until the RayService is ready (exit 1 on timeout or when KubeRay gives up)",
        ),
    ):
        command = cluster_sub.add_parser(name, help=text)
        command.add_argument("--name", default="serve-app")
        command.add_argument("--namespace", default="serve-app")
        command.add_argument("--kubeconfig")
        command.add_argument("--context")
        if name == "status":
            command.add_argument("--json", action="store_true")
        else:
            command.add_argument("--timeout", type=float, default=1800)
            command.add_argument("--interval", type=float, default=5)
    return parser


def main(argv: list[str] | None = None) -> int:
    return core.main(
        argv,
        parser=build_parser(),
        commands={**core.COMMANDS, "serve": _serve, "cluster": _cluster},
    )


if __name__ == "__main__":
    sys.exit(main())
