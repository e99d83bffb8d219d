"""``helm template`` for the chart tests, each distinct command run once per session.

A render is a pure function of its arguments (the chart on disk, the values files, the
``--set`` flags), so the suite's hundreds of renders of the same few value sets share one
run each. Callers get their own copy of the parsed documents (tests edit them), parsed with
libyaml's loader when PyYAML has it (the Python loader took longer than helm itself).
"""

from __future__ import annotations

import copy
import functools
import subprocess
from typing import Any

import yaml

LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _run(args: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60)


@functools.cache
def _parsed(args: tuple[str, ...]) -> tuple[dict, ...]:
    done = _run(args)
    assert done.returncode == 0, done.stderr
    return tuple(d for d in yaml.load_all(done.stdout, Loader=LOADER) if d)


def helm(*args: str) -> subprocess.CompletedProcess:
    """``helm ARGS`` (a render or a lint: no side effects), run once per distinct ``args``."""
    done = _run(tuple(args))
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, done.stderr)


def documents(*args: str) -> list[dict]:
    """The objects ``helm template ARGS`` renders (asserting that it succeeds): a fresh copy."""
    return copy.deepcopy(list(_parsed(tuple(args))))


def load_all(text: str) -> list[dict]:
    """The non-empty YAML documents of ``text``."""
    return [d for d in yaml.load_all(text, Loader=LOADER) if d]


FETCH_OPTIONS = {"--cache", "--token-source", "--keep-revisions"}
"""The model fetch's options with a value, as the chart passes them."""


def fetched_ids(args: list[str]) -> list[str]:
    """The Hub ids a model-fetch container fetches: its arguments less the options."""
    return [
        a for i, a in enumerate(args) if a not in FETCH_OPTIONS and args[i - 1] not in FETCH_OPTIONS
    ]
