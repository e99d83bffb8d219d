"""Admission for generations: a replica runs at most ``parallel`` at once and lets at most
``max_queued`` wait; past that a request is refused at once (429 with a retry hint) instead of
queueing without bound behind generations that take seconds each."""

from __future__ import annotations

import asyncio

from serve_app.errors import OverloadedError


class GenerationSlots:
    def __init__(self, parallel: int, max_queued: int, retry_after_s: float) -> None:
        self.parallel = parallel
        self.max_queued = max_queued
        self.retry_after_s = retry_after_s
        self._free = asyncio.Semaphore(parallel)
        self.active = 0
        self.waiting = 0

    def check(self) -> None:
        """OverloadedError when a request arriving now would be refused."""
        if self.active + self.waiting >= self.parallel + self.max_queued:
            raise OverloadedError(
                f"{self.active} generations are running and {self.waiting} waiting on this "
                f"replica (llm.parallel {self.parallel}, llm.max_queued {self.max_queued}); "
                f"retry in {self.retry_after_s:g}s",
                retry_after_s=self.retry_after_s,
            )

    async def acquire(self) -> None:
        """Take a slot, waiting behind at most ``max_queued`` others; OverloadedError when
        that queue is full. A cancelled wait leaves the counts as they were."""
        self.check()
        self.waiting += 1
        try:
            await self._free.acquire()
        finally:
            self.waiting -= 1
        self.active += 1

    def release(self) -> None:
        self.active -= 1
        self._free.release()

    def stats(self) -> dict[str, int]:
        return {"active": self.active, "waiting": self.waiting, "parallel": self.parallel}
