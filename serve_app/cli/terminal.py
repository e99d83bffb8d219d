"""The CLI's output on a terminal: what a document title, a filename or a model's answer
contains cannot drive the terminal (clear it, rewrite earlier lines, set its title, ring it).
Control characters other than newline, tab and carriage return (progress bars) are written
as visible ``\\xNN`` escapes; JSON output escapes them already."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def neutral(text: str) -> str:
    return CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


class NeutralStream:
    """``stream`` with every write neutralised; everything else passes through."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(neutral(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextmanager
def neutral_output() -> Iterator[None]:
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = NeutralStream(saved[0]), NeutralStream(saved[1])  # type: ignore[assignment,unused-ignore]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
