"""Markdown: ATX (``#``) and setext headings become nested sections."""

from __future__ import annotations

import re
from pathlib import Path

from serve_app.loaders.base import decode_text
from serve_app.loaders.tree import SectionBuilder

ATX = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
SETEXT = re.compile(r"^(=+|-+)\s*$")
FENCE = re.compile(r"^(```|~~~)")


def load_markdown(data: bytes, name: str) -> dict:
    lines = decode_text(data, name).replace("\r\n", "\n").split("\n")
    builder = SectionBuilder()
    title = ""
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line.strip()):
            in_fence = not in_fence
            builder.add_line(line)
            i += 1
            continue
        heading = None if in_fence else ATX.match(line)
        is_setext = (
            not in_fence
            and heading is None
            and line.strip()
            and i + 1 < len(lines)
            and SETEXT.match(lines[i + 1])
            and not builder.pending_paragraph()
        )
        if heading:
            level, text = len(heading.group(1)), heading.group(2)
        elif is_setext:
            level, text = (1 if lines[i + 1].startswith("=") else 2), line.strip()
            i += 1
        else:
            builder.add_line(line)
            i += 1
            continue
        if level == 1 and not title and builder.is_empty():
            title = text  # a leading H1 is the document title, not a section
        else:
            builder.open_section(level, text)
        i += 1
    return {"title": title or Path(name).stem, "sections": builder.build()}
