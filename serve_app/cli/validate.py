"""``serve-app validate``: the configuration checked against reality; exit 1 on any failure."""

from __future__ import annotations

import argparse
import json

from serve_app.config import AppConfig


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    validate = sub.add_parser(
        "validate",
        help="check the configuration against reality (devices, models, tokenizer, stores); "
        "exit 1 on any failure",
    )
    validate.add_argument("--json", action="store_true", help="print the checks as JSON")
    validate.add_argument(
        "--no-load",
        action="store_true",
        help="load no model: check each model's files and take the dense dimension from its "
        "config.json; device checks are reported as not run (a pod without the replicas' "
        "GPUs: the chart's pre-upgrade hook)",
    )
    validate.add_argument(
        "--missing-index-ok",
        action="store_true",
        help="a store that is reached but holds no index under the alias yet is no failure "
        "(a first install: the service creates it at its first start); the chart's hook "
        "passes it where a render cannot tell an install from an upgrade (Argo CD)",
    )


async def run(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.preflight import format_checks, passed, report, validate

    checks = await validate(config, load=not args.no_load, missing_index_ok=args.missing_index_ok)
    print(json.dumps(report(checks), indent=2) if args.json else format_checks(checks))
    return 0 if passed(checks) else 1
