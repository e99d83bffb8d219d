"""Markdown: ATX (``#``) and setext headings become nested sections; block quotes and list
items are flattened to their text.

Parsed line by line with string methods only (no regular expressions): every line is looked
at a bounded number of times, so a hostile line costs time linear in its length.

Headings nest at most six deep (the syntax has six levels). Block quotes and lists nest as
deep as their markers go (``> > > ...``, ``- - - ...``): the quote and bullet markers are
structure, not text, so they are dropped, whatever the depth, and a quoted or listed line keeps
only its text. Kept, each marker would be a model token of its own, and a document made of them
would cost the chunker and the encoders several times what plain text of its size costs
(``tests/serve_app/chunking/test_nesting_cost.py``). An ordered item's number is text (a clause
number; a year that wraps to a line's start looks the same): the last one of a line is kept.

Code is never rewritten: a fenced block keeps its lines (a fence opened inside a quote loses
only the quote's markers), and so does an indented block (4+ columns, not within a paragraph; a
list item's own indented continuation after a blank line is kept as it is too, markers and
all: a simplification of CommonMark that only ever keeps text).
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


def _marker_end(line: str, start: int) -> tuple[int, bool] | None:
    """Where the container marker at ``start`` ends (its following blank included) and
    whether it is an ordered item's, or None when none starts there: ``>`` (CommonMark's block
    quote), ``-``, ``+``, ``*`` and ``1.``/``1)`` (list items: 1-9 digits) followed by a blank
    or the end of the line."""
    if line.startswith(">", start):
        end = start + 1
        return (end + 1 if line.startswith((" ", "\t"), end) else end), False
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
    return (end + 1 if end < len(line) else end), end > start + 1


def split_containers(line: str) -> tuple[str, int]:
    """``line`` without its leading block-quote and bullet markers, however many, and how many
    of them were quotes (``> > - text`` is ``("text", 2)``); time linear in the line's length.

    An ordered item's number is kept as text: it is often what the reader cites ("12. The
    tenant shall ...") and cannot be told from ordinary text that wraps to a line's start
    ("... in\n2024. After ..."). Of several on a line only the last is kept, so a line of
    ``1. 1. 1. ...`` still costs one number."""
    position, quotes, ordered = 0, 0, None
    while True:
        start = position
        while start < len(line) and line[start] in " \t":
            start += 1
        marker = _marker_end(line, start)
        if marker is None:
            break
        position, is_ordered = marker
        if is_ordered:
            ordered = (start, position)
        elif line.startswith(">", start):
            quotes += 1
    if position == 0:
        return line, 0
    if ordered is None:
        return line[start:], quotes
    return line[ordered[0] : ordered[1]] + line[start:], quotes


def strip_containers(line: str) -> str:
    """``line`` without its leading block-quote and bullet markers (``split_containers``)."""
    return split_containers(line)[0]


def _strip_quotes(line: str, depth: int) -> str | None:
    """``line`` without ``depth`` block-quote markers (a line of code fenced inside a quote keeps
    everything but the quote's own markers); None when it has fewer: the quote, and with it
    the fence, has ended (CommonMark)."""
    position = 0
    for _ in range(depth):
        start = position
        while start < len(line) and line[start] in " \t":
            start += 1
        if not line.startswith(">", start):
            return None
        position = start + 1
        if line.startswith((" ", "\t"), position):
            position += 1
    return line[position:]


def _indent_columns(line: str) -> int:
    """Columns of leading blanks, counted up to 4 (a tab goes to the next multiple of 4)."""
    columns = 0
    for char in line:
        if columns >= 4 or char not in " \t":
            break
        columns = columns + 4 - columns % 4 if char == "\t" else columns + 1
    return columns


def _is_fence(line: str) -> bool:
    return line.strip().startswith(("```", "~~~"))


def load_markdown(data: bytes, name: str) -> dict:
    lines = decode_text(data, name).replace("\r\n", "\n").split("\n")
    builder = SectionBuilder()
    title = ""
    fence_quotes: int | None = None  # inside a fence: the quotes it was opened in
    in_code = False  # in an indented code block (4+ columns)
    i = 0
    while i < len(lines):
        line = lines[i]
        fenced = None if fence_quotes is None else _strip_quotes(line, fence_quotes)
        if fenced is not None:
            builder.add_line(fenced)
            if _is_fence(fenced):
                fence_quotes = None
            i += 1
            continue
        fence_quotes = None  # not in a fence, or its quote ended
        # Indented code cannot interrupt a paragraph (CommonMark): it starts after a blank
        # line, a heading or the document's start, and goes on while lines stay indented.
        starts = not builder.pending_paragraph()
        in_code = _indent_columns(line) >= 4 and (in_code or starts) and bool(line.strip())
        if in_code:
            builder.add_line(line)  # code: every character is text
            i += 1
            continue
        heading = atx_heading(line)
        content, quotes = (line, 0) if heading else split_containers(line)
        if _is_fence(content):
            fence_quotes = quotes
            builder.add_line(content)
            i += 1
            continue
        # A setext heading is one plain line (not fenced, quoted or listed) and its underline.
        plain = content is line and heading is None and line.strip()
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
