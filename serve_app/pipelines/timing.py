"""Per-stage wall-clock timings for responses."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")


class StageTimer:
    def __init__(self) -> None:
        self.timings_ms: dict[str, float] = {}

    async def run(
        self, stage: str, start_work: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Time ``start_work(*args)``. It is called here, not by the caller: a run cancelled
        before it starts (a gather cut short) then leaves no coroutine behind, never awaited."""
        start = time.perf_counter()
        try:
            return await start_work(*args, **kwargs)
        finally:
            self.record(stage, start)

    def record(self, stage: str, start: float) -> None:
        self.timings_ms[stage] = round((time.perf_counter() - start) * 1000, 3)
