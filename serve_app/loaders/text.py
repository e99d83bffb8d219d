"""Plain text: the whole file is the body; the title is the file name."""

from __future__ import annotations

from pathlib import Path

from serve_app.loaders.base import decode_text


def load_text(data: bytes, name: str) -> dict:
    text = decode_text(data, name).replace("\r\n", "\n")
    return {"title": Path(name).stem, "text": text.strip()}
