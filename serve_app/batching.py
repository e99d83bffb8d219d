"""Coalescing concurrent calls into batched calls (asyncio, one event loop).

Used where one call has a fixed cost much larger than its per-item cost: a Ray handle call
to a model or store replica, one engine call of the embedded store. Natural batching, no
timer: an idle ``Coalescer`` sends an item at once (no latency added at low load); while
``max_in_flight`` batches are running, new items queue, and the next free slot takes every
queued item (up to ``max_items``) in one call. Under load, batches grow by themselves to what
arrived during one call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

Flush = Callable[[list[Item]], Awaitable[Sequence[Result]]]


class Coalescer(Generic[Item, Result]):
    """``await submit(item)`` returns ``flush([..., item, ...])``'s result for that item.

    ``flush`` gets the items of one batch and returns one result per item, in order; if it
    raises, every caller in that batch gets the exception. A caller that is cancelled before
    its batch starts is left out of it; one cancelled while its batch runs does not cancel
    the batch (the others still want their results).
    """

    def __init__(
        self, flush: Flush[Item, Result], max_items: int = 64, max_in_flight: int = 2
    ) -> None:
        if max_items < 1 or max_in_flight < 1:
            raise ValueError("max_items and max_in_flight must be >= 1")
        self._flush = flush
        self.max_items = max_items
        self.max_in_flight = max_in_flight
        self._pending: list[tuple[Item, asyncio.Future[Result]]] = []
        self._in_flight = 0
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, item: Item) -> Result:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        self._pending.append((item, future))
        if not self._scheduled:
            # One loop turn later, so that items submitted in the same turn share a batch.
            self._scheduled = True
            loop.call_soon(self._start_batches)
        return await future

    def _start_batches(self) -> None:
        self._scheduled = False
        while self._in_flight < self.max_in_flight:
            self._pending = [(i, f) for i, f in self._pending if not f.done()]
            if not self._pending:
                return
            batch, self._pending = (
                self._pending[: self.max_items],
                self._pending[self.max_items :],
            )
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        try:
            results = await self._flush([item for item, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(
                    f"batched call returned {len(results)} results for {len(batch)} items"
                )
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except Exception as error:  # handed to every caller of the batch
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
        else:
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
        finally:
            self._in_flight -= 1
            if self._pending:
                self._start_batches()


def concatenating(
    call: Callable[[list[Item]], Awaitable[Sequence[Result]]],
) -> Flush[list[Item], Sequence[Result]]:
    """A flush for callers that each submit a list: one ``call`` on the concatenation, whose
    outputs (one per element, in order) are cut back into one slice per caller."""

    async def flush(groups: list[list[Item]]) -> list[Sequence[Result]]:
        outputs = await call([x for group in groups for x in group])
        sliced, position = [], 0
        for group in groups:
            sliced.append(outputs[position : position + len(group)])
            position += len(group)
        return sliced

    return flush
