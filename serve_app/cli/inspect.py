"""``serve-app inspect``: what the stores hold (sizes, models, versions, payload, per
collection), here (no model loaded) or through ``--url`` (the ``admin`` scope)."""

from __future__ import annotations

import argparse
import json
import os

from serve_app.cli.common import collection_service, service_arguments
from serve_app.config import AppConfig
from serve_app.errors import InvalidInputError


def add_parser(sub: argparse._SubParsersAction) -> None:
    inspect = sub.add_parser(
        "inspect", help="what the stores hold: sizes, models, versions, payload, per collection"
    )
    inspect.add_argument("--tenant", help="only this tenant (default: every tenant)")
    inspect.add_argument("--collection", help="only this collection of --tenant")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    service_arguments(inspect)


async def run(config: AppConfig, args: argparse.Namespace) -> int:
    from serve_app.inspection import format_report

    if args.collection and not args.tenant:
        raise InvalidInputError("--collection needs --tenant")
    if args.url:
        # Not common.client: --tenant is a filter of the report here, not a scope.
        from serve_app.client import ServiceClient

        api = ServiceClient(args.url, os.environ.get(args.api_key_env), args.timeout_s)
        query = {k: v for k, v in (("tenant", args.tenant), ("collection", args.collection)) if v}
        try:
            report = await api.call("GET", "/v1/admin/inspect", params=query)
        finally:
            await api.close()
    else:
        async with collection_service(config) as service:
            report = await service.inspect(args.tenant, args.collection)
    print(json.dumps(report, indent=2, default=str) if args.json else format_report(report))
    return 0
