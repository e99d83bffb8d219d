"""Per-stage wall-clock timings for responses."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


class StageTimer:
    def __init__(self) -> None:
        self.timings_ms: dict[str, float] = {}

    async def run(self, stage: str, awaitable: Awaitable[T]) -> T:
        start = time.perf_counter()
        try:
            return await awaitable
        finally:
            self.record(stage, start)

    def record(self, stage: str, start: float) -> None:
        self.timings_ms[stage] = round((time.perf_counter() - start) * 1000, 3)
