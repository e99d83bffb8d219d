"""One run of a piece of work at a time, shared by every caller that comes while it runs:
a flood of unauthenticated probes (``/readyz``, ``/metrics``) costs one round of the internal
calls behind them, never one each."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """``__call__(work)`` awaits the run in flight, or the last one's outcome while it is at
    most ``fresh_s`` old, else starts ``work()``. A caller that leaves does not cancel the run
    for the others."""

    def __init__(self, fresh_s: float = 0.0) -> None:
        self.fresh_s = fresh_s
        self._run: asyncio.Future[T] | None = None
        self._ended = 0.0

    def _reusable(self, run: asyncio.Future[T] | None) -> bool:
        if run is None or run.get_loop() is not asyncio.get_running_loop():
            return False
        return not run.done() or time.monotonic() - self._ended <= self.fresh_s

    async def __call__(self, work: Callable[[], Awaitable[T]]) -> T:
        run = self._run
        if not self._reusable(run):
            run = self._run = asyncio.ensure_future(work())
            run.add_done_callback(self._end)
        assert run is not None
        return await asyncio.shield(run)

    def _end(self, run: asyncio.Future[T]) -> None:
        self._ended = time.monotonic()
        if not run.cancelled():
            run.exception()  # retrieved: a failure shared by its callers is no "never retrieved"
