"""Parsing the project's Python sources in tests."""

from __future__ import annotations

import ast
from concurrent.futures import ThreadPoolExecutor

ATTEMPTS = 3


def parse(text: str) -> ast.Module:
    """``ast.parse`` in a thread of its own. On CPython 3.11 a parse can fail with a spurious
    ``SystemError: AST constructor recursion depth mismatch``: seen in CI after a test of
    pathological input ran deep on the same worker (tests/serve_app/api/test_hostile.py), and
    again, on 2026-11-30, in a fresh thread on a loaded host (``before=18, after=39``). The
    source is not at fault (the same text parses on the next try), so each attempt gets a new
    thread, and a real syntax error still fails at once."""
    for attempt in range(ATTEMPTS):
        with ThreadPoolExecutor(1) as pool:
            try:
                return pool.submit(ast.parse, text).result()
            except SystemError as error:
                if "recursion depth mismatch" not in str(error) or attempt == ATTEMPTS - 1:
                    raise
    raise AssertionError("unreachable")
