"""Markdown: ATX (``#``) and setext headings become nested sections; block quotes and list
items are flattened to their text.

Parsed line by line with string methods only (no regular expressions): every line is looked
at a bounded number of times, so a hostile line costs time linear in its length.

Headings nest at most six deep (the syntax has six levels). Block quotes and lists nest as
deep as their markers go (``> > > ...``, ``- - - ...``): the markers are structure, not text,
so they are dropped, whatever the depth, and a quoted or listed line keeps only its text.
Kept, each marker would be a model token of its own, and a document made of them would cost
the chunker and the encoders several times what plain text of its size costs
(``tests/serve_app/chunking/test_nesting_cost.py``).
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


def _marker_end(line: str, start: int) -> int | None:
    """Where the container marker at ``start`` ends (its following blank included), or None
    when none starts there: ``>`` (CommonMark's block quote), ``-``, ``+``, ``*`` and
    ``1.``/``1)`` (list items: 1-9 digits) followed by a blank or the end of the line."""
    if line.startswith(">", start):
        end = start + 1
        return end + 1 if line.startswith((" ", "\t"), end) else end
    end = start
    if line.startswith(("-", "+", "*"), start):
        end = start + 1
    else:
        while end < len(line) and end - start < 9 and line[end].isdigit():
            end += 1
        if end == start or not line.startswith((".", ")"), end):
            return None
        end += 1
    if end < len(line) and not line[end].isspace():
        return None
    return end + 1 if end < len(line) else end


def strip_containers(line: str) -> str:
    """``line`` without its leading block-quote and list-item markers, however many
    (``> > - 1. text`` is ``text``); time linear in the line's length."""
    position = 0
    while True:
        start = position
        while start < len(line) and line[start] in " \t":
            start += 1
        end = _marker_end(line, start)
        if end is None:
            return line if position == 0 else line[start:]
        position = end


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
        content = line if in_fence or heading else strip_containers(line)
        # A setext heading is one plain line (not fenced, quoted or listed) and its underline.
        plain = content is line and not in_fence and heading is None and line.strip()
        underline = setext_level(lines[i + 1]) if plain and i + 1 < len(lines) else None
        if heading:
            level, text = heading
        elif underline and not builder.pending_paragraph():
            level, text = underline, " ".join(line.split())
            i += 1
        else:
            builder.add_line(content)
            i += 1
            continue
        if level == 1 and not title and builder.is_empty():
            title = text  # a leading H1 is the document title, not a section
        else:
            builder.open_section(level, text)
        i += 1
    return {"title": title or Path(name).stem, "sections": builder.build()}
