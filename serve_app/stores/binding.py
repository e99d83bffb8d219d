"""The model guard, written once: the binding an index recorded (``IndexModels.as_dict`` and
what each store records beside it) judged against the one configured now. The stores open
or refuse by it (``stores/versioning.py``, ``stores/embedded/shard.py``) and ``validate``
reports by it (``preflight.py``), so the two can never disagree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BindingVerdict:
    """``differences``: each field whose recorded and configured values differ (recorded,
    configured), nested fields by their own name; ``unrecorded``: the ``*_revision`` fields
    configured but never recorded (an index built before revisions were recorded), which
    are not differences."""

    differences: dict[str, tuple[Any, Any]]
    unrecorded: list[str]

    @property
    def refused(self) -> bool:
        """The guard refuses the index (or migrates it, where the configuration says so)."""
        return bool(self.differences)

    @property
    def records_revisions(self) -> bool:
        """The index opens as it is and records the revisions it lacks."""
        return not self.differences and bool(self.unrecorded)

    def describe(self) -> str:
        """Each difference named with both values (the guard's message)."""
        return "; ".join(
            f"{key}: recorded {old!r}, configured {new!r}"
            for key, (old, new) in self.differences.items()
        )

    def unrecorded_warning(self, where: str) -> str:
        return (
            f"{where} recorded no {', '.join(self.unrecorded)} (built before revisions were "
            "recorded): opened with the configured models, whose revisions it records from "
            "now on"
        )


def judge_binding(recorded: Any, configured: Any) -> BindingVerdict:
    differences: dict[str, tuple[Any, Any]] = {}
    unrecorded: list[str] = []
    _compare(recorded, configured, "binding", differences, unrecorded)
    return BindingVerdict(differences, unrecorded)


def _compare(
    recorded: Any,
    configured: Any,
    name: str,
    differences: dict[str, tuple[Any, Any]],
    unrecorded: list[str],
) -> None:
    if recorded == configured:
        return
    if not isinstance(recorded, dict) or not isinstance(configured, dict):
        differences[name] = (recorded, configured)
        return
    for key in [*configured, *(k for k in recorded if k not in configured)]:
        old, new = recorded.get(key), configured.get(key)
        if old == new:
            continue
        if key.endswith("_revision") and key not in recorded:
            unrecorded.append(key)
        else:
            _compare(old, new, key, differences, unrecorded)
