"""The disk use of a store's files, where the store itself does not report it."""

from __future__ import annotations

from pathlib import Path


def directory_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (0 when it does not exist)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0
