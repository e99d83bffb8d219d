"""One model, two lanes, one worker thread per lane: queries never queue behind documents.

The model queue of text-embeddings-inference, for models whose calls block (torch, vLLM's
offline engine). Callers on any event loop ``await submit(lane, items)``; each lane has one
worker thread that takes whatever its lane has queued and runs it as one batch, so
concurrent requests cost one thread hand-off per batch rather than one per request.

* ``query``: searches queued while a batch runs share the next one (up to
  ``query_batch_size`` items). The lane has its own thread, so a search runs beside an
  ingest's document batch instead of after it (on a GPU their kernels interleave; on a CPU
  they share the cores); a backend that cannot run two calls at once (vLLM's offline
  engine) serialises them with its own lock, and then ``document_batch_size`` bounds the wait.
* ``document``: a long request is cut into batches of at most ``document_batch_size``
  items, so a large upload cannot hold the model for minutes at a time.
* A caller cancelled before its items run is dropped (a cancelled upload stops using the
  model); one cancelled mid-request stops at the next batch boundary.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from serve_app.errors import ServiceUnavailableError

Lane = Literal["query", "document"]
LANES: tuple[Lane, ...] = ("query", "document")
RunBatch = Callable[[Lane, list[Any]], tuple[Sequence[Any], dict]]
"""Blocking: one output per item, in order, plus batch statistics (for metrics)."""


class _Request:
    __slots__ = ("done", "future", "items", "loop", "parts", "position", "stats", "submitted")

    def __init__(self, items: list[Any], loop: asyncio.AbstractEventLoop) -> None:
        self.items = items
        self.loop = loop
        self.future: asyncio.Future[tuple[Sequence[Any], dict]] = loop.create_future()
        self.position = 0  # items handed to the model so far
        self.parts: list[Sequence[Any]] = []
        self.stats: dict = {}
        self.submitted = time.perf_counter()
        self.done = False

    def finish(self, result: tuple[Sequence[Any], dict] | BaseException) -> None:
        self.done = True

        def settle() -> None:
            if self.future.done():
                return
            if isinstance(result, BaseException):
                self.future.set_exception(result)
            else:
                self.future.set_result(result)

        # A closed loop raises RuntimeError: its caller is gone, nobody is waiting.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(settle)


def _join(parts: list[Sequence[Any]]) -> Sequence[Any]:
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts)
    return [x for part in parts for x in part]


class ModelQueue:
    """Batches for one blocking model, one worker thread per lane; see the module docstring."""

    def __init__(
        self, name: str, run: RunBatch, query_batch_size: int, document_batch_size: int
    ) -> None:
        if query_batch_size < 1 or document_batch_size < 1:
            raise ValueError("batch sizes must be >= 1")
        self.name = name
        self._run = run
        self._limits = {"query": query_batch_size, "document": document_batch_size}
        self._lanes: dict[Lane, deque[_Request]] = {lane: deque() for lane in LANES}
        self._wake = {lane: threading.Condition() for lane in LANES}
        self._threads: dict[Lane, threading.Thread] = {}
        self._closed = False

    async def submit(self, lane: Lane, items: list[Any]) -> tuple[Sequence[Any], dict]:
        """Outputs for ``items`` (in order) and the statistics of the batch that ran them,
        with ``queue_s``: how long the request waited before its first item ran."""
        if lane not in self._lanes:
            raise ValueError(f"unknown lane {lane!r}")
        if not items:
            return self._run(lane, [])
        request = _Request(list(items), asyncio.get_running_loop())
        with self._wake[lane]:
            if self._closed:
                raise RuntimeError(f"the {self.name} model queue is closed")
            self._lanes[lane].append(request)
            if lane not in self._threads:
                if not self._threads:  # by weak reference: the queue may go before exit
                    atexit.register(_finish_at_exit, weakref.ref(self))
                self._threads[lane] = threading.Thread(
                    target=self._work, args=(lane,), name=f"{self.name}-{lane}", daemon=True
                )
                self._threads[lane].start()
            self._wake[lane].notify()
        try:
            return await request.future
        except asyncio.CancelledError:
            request.done = True  # the worker skips what it has not started
            raise

    def check_health(self) -> None:
        """ServiceUnavailableError once this queue cannot answer: closed, or a lane's worker
        thread gone (what it is asked would wait for ever)."""
        if self._closed:
            raise ServiceUnavailableError(f"the {self.name} model queue is closed")
        dead = [lane for lane, thread in self._threads.items() if not thread.is_alive()]
        if dead:
            raise ServiceUnavailableError(
                f"the {self.name} model queue's {'/'.join(dead)} worker thread is gone"
            )

    def pending(self) -> dict[str, int]:
        """Queued requests per lane (for metrics and tests)."""
        return {lane: len(queue) for lane, queue in self._lanes.items()}

    def close(self) -> None:
        """Stop the workers once the batches in hand are done; queued requests fail."""
        stranded: list[_Request] = []
        for lane in LANES:
            with self._wake[lane]:
                self._closed = True
                stranded.extend(self._lanes[lane])
                self._lanes[lane].clear()
                self._wake[lane].notify_all()
        for request in stranded:
            request.finish(RuntimeError(f"the {self.name} model queue was closed"))

    def _finish_at_exit(self, timeout_s: float = 60.0) -> None:
        """At interpreter exit: close, and let a batch in hand finish (bounded). A worker
        still inside the model when the interpreter tears down aborts the process ("terminate
        called without an active exception": seen after a caller was cancelled mid-batch)."""
        self.close()
        deadline = time.monotonic() + timeout_s
        for thread in list(self._threads.values()):
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- the worker threads --------------------------------------------------------------
    def _next_batch(self, lane: Lane) -> list[tuple[_Request, int, int]]:
        """Under the lane's lock: (request, start, end) slices of its next batch."""
        queue = self._lanes[lane]
        budget = self._limits[lane]
        pieces: list[tuple[_Request, int, int]] = []
        while queue and budget:
            request = queue[0]
            if request.done:
                queue.popleft()
                continue
            start = request.position
            end = min(len(request.items), start + budget)
            pieces.append((request, start, end))
            request.position = end
            budget -= end - start
            if end == len(request.items):
                queue.popleft()
        return pieces

    def _work(self, lane: Lane) -> None:
        wake = self._wake[lane]
        while True:
            with wake:
                pieces = self._next_batch(lane)
                while not pieces:
                    if self._closed:
                        return
                    wake.wait()
                    pieces = self._next_batch(lane)
            items = [x for request, start, end in pieces for x in request.items[start:end]]
            started = time.perf_counter()
            try:
                outputs, stats = self._run(lane, items)
            except Exception as error:  # every request of the batch fails with the model's error
                for request, _, _ in pieces:
                    if not request.done:
                        self._drop(request, lane)
                        request.finish(error)
                continue
            offset = 0
            for request, start, end in pieces:
                part = outputs[offset : offset + end - start]
                offset += end - start
                if request.done:
                    continue
                if not request.parts:
                    request.stats = {**stats, "queue_s": started - request.submitted}
                request.parts.append(part)
                if end == len(request.items):
                    request.finish((_join(request.parts), request.stats))

    def _drop(self, request: _Request, lane: Lane) -> None:
        with self._wake[lane], contextlib.suppress(ValueError):  # already off the lane
            self._lanes[lane].remove(request)


PairScorer = Callable[[list[str], list[str]], tuple[list[float], dict]]


class PairQueue:
    """A reranker's queue: (query, passage) pairs of concurrent searches share model calls.
    Reranking happens at query time, so every pair rides the query lane."""

    def __init__(self, name: str, score_pairs: PairScorer, config: Any) -> None:
        self._score_pairs = score_pairs
        self.queue = ModelQueue(
            name, self._run, config.query_batch_size, config.documents(config.query_batch_size)
        )

    def _run(self, _lane: Lane, pairs: list[tuple[str, str]]) -> tuple[list[float], dict]:
        return self._score_pairs([q for q, _ in pairs], [p for _, p in pairs])

    async def score(self, query: str, passages: list[str]) -> tuple[list[float], dict]:
        scores, stats = await self.queue.submit("query", [(query, p) for p in passages])
        return list(scores), stats

    def check_health(self) -> None:
        self.queue.check_health()

    def close(self) -> None:
        self.queue.close()


def _finish_at_exit(queue: weakref.ref[ModelQueue]) -> None:
    alive = queue()
    if alive is not None:
        alive._finish_at_exit()
