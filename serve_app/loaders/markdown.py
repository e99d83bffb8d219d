"""Markdown: ATX (``#``) and setext headings become nested sections.

Parsed line by line with string methods only (no regular expressions): every line is looked
at a bounded number of times, so a hostile line costs time linear in its length.
"""

from __future__ import annotations

from pathlib import Path

from serve_app.loaders.base import decode_text
from serve_app.loaders.tree import SectionBuilder


def atx_heading(line: str) -> tuple[int, str] | None:
    """(level, text) of an ATX heading line (CommonMark), else None.

    Up to three spaces of indentation, 1-6 ``#`` and a blank before the text; a
    closing run of ``#`` counts only after a blank. Blank runs inside the text collapse to one.
    """
    stripped = line.lstrip(" ")
    if len(line) - len(stripped) > 3 or not stripped.startswith("#"):
        return None
    level = len(stripped) - len(stripped.lstrip("#"))
    rest = stripped[level:]
    if level > 6 or not rest or not rest[0].isspace():
        return None
    text = rest.strip()
    unclosed = text.rstrip("#")
    if not unclosed or unclosed[-1].isspace():
        text = unclosed
    return level, " ".join(text.split())


def setext_level(line: str) -> int | None:
    """1 for a ``===`` underline, 2 for ``---``, else None."""
    marks = line.rstrip()
    if marks and marks == "=" * len(marks):
        return 1
    if marks and marks == "-" * len(marks):
        return 2
    return None


def _is_fence(line: str) -> bool:
    return line.strip().startswith(("```", "~~~"))


def load_markdown(data: bytes, name: str) -> dict:
    lines = decode_text(data, name).replace("\r\n", "\n").split("\n")
    builder = SectionBuilder()
    title = ""
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if _is_fence(line):
            in_fence = not in_fence
            builder.add_line(line)
            i += 1
            continue
        heading = None if in_fence else atx_heading(line)
        underline = (
            setext_level(lines[i + 1])
            if not in_fence and heading is None and line.strip() and i + 1 < len(lines)
            else None
        )
        if heading:
            level, text = heading
        elif underline and not builder.pending_paragraph():
            level, text = underline, " ".join(line.split())
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
