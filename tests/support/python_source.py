"""Parsing the project's Python sources in tests."""

from __future__ import annotations

import ast
from concurrent.futures import ThreadPoolExecutor


def parse(text: str) -> ast.Module:
    """``ast.parse`` in a thread of its own. On CPython 3.11 a thread whose recursion ran deep
    earlier (a test of pathological input on the same worker) can fail a later parse with a
    spurious ``SystemError: AST constructor recursion depth mismatch`` (seen once in CI, after
    tests/serve_app/api/test_hostile.py); a new thread starts with its own recursion count."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(ast.parse, text).result()
