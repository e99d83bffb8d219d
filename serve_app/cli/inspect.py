"""``serve-app inspect``: what the stores hold (sizes, models, versions, payload, per
collection), here (no model loaded) or through ``--url`` (the ``admin`` scope)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from serve_app.cli.common import collection_service, connected, service_arguments
from serve_app.config import AppConfig
from serve_app.errors import InvalidInputError
from serve_app.schemas import ScopeKey


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inspect = sub.add_parser(
        "inspect", help="what the stores hold: sizes, models, versions, payload, per collection"
    )
    inspect.add_argument("--tenant", help="only this tenant (default: every tenant)")
    inspect.add_argument("--collection", help="only this collection of --tenant")
    inspect.add_argument("--json", action="store_true", help="print the report as JSON")
    service_arguments(inspect)


async def run(config: AppConfig, args: argparse.Namespace) -> int:
    if args.collection and not args.tenant:
        raise InvalidInputError("--collection needs --tenant")
    if args.url:
        # --tenant is a filter of the report here, not a scope.
        async with connected(args, tenant_scoped=False) as api:
            report = await api.inspect(args.tenant, args.collection)
    else:
        async with collection_service(config) as service:
            selector = ScopeKey(args.tenant, args.collection) if args.tenant else None
            report = await service.inspect(selector)
    print(json.dumps(report, indent=2, default=str) if args.json else format_report(report))
    return 0


def _size(value: int | None) -> str:
    if value is None:
        return "not reported"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return str(value)


def format_report(report: dict[str, Any]) -> str:
    """The report as text for a terminal."""
    lines = [f"topology: {report['topology']} (strategies: {', '.join(report['strategies'])})"]
    for store in report["stores"]:
        lines.append("")
        lines.append(f"[{store['store']}] {store.get('location', '')}")
        if store.get("alias"):
            lines.append(
                f"  alias {store['alias']} -> {store.get('physical')} "
                f"(versions: {', '.join(store.get('versions') or []) or '-'})"
            )
        lines.append(f"  strategies: {', '.join(store['strategies'])}; points: {store['points']}")
        binding = store.get("binding") or {}
        lines.append(
            "  models: "
            + ", ".join(f"{k}={v}" for k, v in binding.items() if k != "payload_schema")
            + (
                f"; payload schema {binding['payload_schema']}"
                if "payload_schema" in binding
                else ""
            )
        )
        indexes = store.get("payload_indexes") or {}
        lines.append(
            "  payload indexes: "
            + (", ".join(f"{k} ({v})" for k, v in indexes.items()) or "none reported")
        )
        lines.append(f"  on disk: {_size(store.get('disk_bytes'))}")
        sample = store.get("payload_fields") or {}
        if sample:
            lines.append("  payload fields (sample):")
            lines.extend(f"    {key}: {value!r}" for key, value in sample.items())
    lines.append("")
    lines.append(f"{'tenant':<20} {'collection':<20} {'state':<9} chunks / documents per store")
    for entry in report["collections"]:
        per_store = "; ".join(
            f"{name} {entry['chunks'][name]} / {entry['documents'][name]}"
            for name in entry["chunks"]
        )
        lines.append(
            f"{entry['tenant_id']:<20} {entry['collection']:<20} {entry['state']:<9} {per_store}"
        )
    if not report["collections"]:
        lines.append("(nothing stored)")
    return "\n".join(lines)
