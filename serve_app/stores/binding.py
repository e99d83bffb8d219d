"""The model guard's comparisons: the binding an index recorded against the one configured
now (``IndexModels.as_dict`` and what each store records beside it)."""

from __future__ import annotations

from typing import Any


def binding_changes(recorded: Any, configured: Any) -> str:
    """What differs between the binding an index recorded and the one configured now, each
    field named with both values (the model guard's message)."""
    if not isinstance(recorded, dict) or not isinstance(configured, dict):
        return f"recorded {recorded!r}, configured {configured!r}"
    changes = []
    for key in [*configured, *(k for k in recorded if k not in configured)]:
        old, new = recorded.get(key), configured.get(key)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            changes.append(binding_changes(old, new))
        else:
            changes.append(f"{key}: recorded {old!r}, configured {new!r}")
    return "; ".join(changes)


def unrecorded_revisions(recorded: Any, configured: Any) -> list[str] | None:
    """The ``*_revision`` fields ``configured`` has and ``recorded`` lacks (an index built
    before revisions were recorded), when that is all that differs; None when anything else
    differs (a recorded revision that differs included), ``[]`` when nothing does."""
    if recorded == configured:
        return []
    if not isinstance(recorded, dict) or not isinstance(configured, dict):
        return None
    missing: list[str] = []
    for key in [*configured, *(k for k in recorded if k not in configured)]:
        old, new = recorded.get(key), configured.get(key)
        if old == new:
            continue
        if key.endswith("_revision") and key not in recorded:
            missing.append(key)
            continue
        nested = unrecorded_revisions(old, new)
        if nested is None:
            return None
        missing.extend(nested)
    return missing


def revisions_warning(where: str, missing: list[str]) -> str:
    return (
        f"{where} recorded no {', '.join(missing)} (built before revisions were recorded): "
        "opened with the configured models, whose revisions it records from now on"
    )
