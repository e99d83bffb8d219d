"""A benchmark's report: ``STEM.json`` (the figures), ``STEM.md`` (the same as tables), printed."""

from __future__ import annotations

import json
from pathlib import Path


def write_report(stem: Path, report: dict, markdown: str | list[str]) -> None:
    text = markdown if isinstance(markdown, str) else "\n".join(markdown)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=2))
    stem.with_suffix(".md").write_text(text.rstrip("\n") + "\n")
    print(text)
