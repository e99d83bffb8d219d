"""The service's access lines (``serve_app.access``) as JSON, captured for one test."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Iterator

from serve_app.api.observability import JsonFormatter


class AccessLines:
    def __init__(self) -> None:
        self.stream = io.StringIO()

    def text(self) -> str:
        return self.stream.getvalue()

    def entries(self) -> list[dict]:
        return [json.loads(line) for line in self.text().splitlines()]


@contextlib.contextmanager
def captured_access_lines() -> Iterator[AccessLines]:
    """Every access line written inside the block, at INFO and above, formatted as shipped."""
    lines = AccessLines()
    handler = logging.StreamHandler(lines.stream)
    handler.setFormatter(JsonFormatter())
    access = logging.getLogger("serve_app.access")
    previous = access.level, access.disabled
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    # A replica built in this process before (deployments/replicas/logs.py) may have switched
    # the logger off, as it does on Serve, where Serve's own access log takes its place.
    access.disabled = False
    try:
        yield lines
    finally:
        access.removeHandler(handler)
        access.setLevel(previous[0])
        access.disabled = previous[1]
