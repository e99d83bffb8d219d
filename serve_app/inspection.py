"""``serve-app inspect``: what the configured stores hold, read from the stores themselves
(no model is loaded, and an index built with other models is shown, not refused)."""

from __future__ import annotations

from typing import Any

from serve_app.config import AppConfig
from serve_app.stores.base import TOPOLOGIES, ScopeKey
from serve_app.stores.index import StoreIndex


async def inspect_stores(config: AppConfig, selector: ScopeKey | None = None) -> dict[str, Any]:
    """The inspection report of the configured topology (``StoreIndex.inspect``)."""
    index = TOPOLOGIES.create(config.stores.topology, config)
    assert isinstance(index, StoreIndex)
    try:
        await index.attach()
        report = await index.inspect(selector)
    finally:
        await index.close()
    return {"topology": config.stores.topology, **report}


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
