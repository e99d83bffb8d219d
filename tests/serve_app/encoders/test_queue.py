"""The model queue: one worker thread per lane, queries beside documents, bounded batches."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from serve_app.encoders.queue import ModelQueue


class Model:
    """A blocking stand-in model that records batches; document batches can be held."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, list[int]]] = []
        self.threads: dict[str, set[str]] = {"query": set(), "document": set()}
        self.hold_documents = threading.Event()
        self.hold_documents.set()
        self.document_started = threading.Event()
        self.fail_on: int | None = None

    def __call__(self, lane: str, items: list[int]) -> tuple[np.ndarray, dict]:
        self.batches.append((lane, list(items)))
        self.threads[lane].add(threading.current_thread().name)
        if lane == "document":
            self.document_started.set()
            assert self.hold_documents.wait(10)
        if self.fail_on in items:
            raise ValueError("model failure")
        return np.asarray(items, dtype=np.float32) * 2, {"batch_size": len(items)}


@pytest.fixture
def model():
    return Model()


async def test_a_query_runs_while_a_document_batch_is_running(model):
    queue = ModelQueue("m", model, query_batch_size=8, document_batch_size=4)
    model.hold_documents.clear()
    upload = asyncio.create_task(queue.submit("document", list(range(4))))
    await asyncio.to_thread(model.document_started.wait, 5)
    vectors, stats = await asyncio.wait_for(queue.submit("query", [7]), 5)
    assert vectors.tolist() == [14.0] and not upload.done()
    model.hold_documents.set()
    assert (await upload)[0].tolist() == [0, 2, 4, 6]
    assert stats["batch_size"] == 1 and stats["queue_s"] >= 0
    assert model.threads["query"].isdisjoint(model.threads["document"])
    queue.close()


async def test_documents_are_cut_into_bounded_batches_and_joined_in_order(model):
    queue = ModelQueue("m", model, query_batch_size=8, document_batch_size=3)
    vectors, _ = await queue.submit("document", list(range(8)))
    assert vectors.tolist() == [i * 2 for i in range(8)]
    assert [items for lane, items in model.batches] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    queue.close()


async def test_queries_queued_behind_a_batch_share_the_next_one():
    release = threading.Event()
    batches: list[list[int]] = []

    def slow(lane: str, items: list[int]) -> tuple[list[int], dict]:
        batches.append(list(items))
        if len(batches) == 1:
            assert release.wait(5)
        return [i + 1 for i in items], {}

    queue = ModelQueue("m", slow, query_batch_size=16, document_batch_size=4)
    first = asyncio.create_task(queue.submit("query", [0]))
    while not batches:
        await asyncio.sleep(0.005)
    rest = [asyncio.create_task(queue.submit("query", [i])) for i in range(1, 6)]
    await asyncio.sleep(0.05)
    release.set()
    assert (await first)[0] == [1]
    assert [list((await t)[0]) for t in rest] == [[i + 1] for i in range(1, 6)]
    assert batches == [[0], [1, 2, 3, 4, 5]]
    queue.close()


async def test_a_cancelled_upload_stops_using_the_model(model):
    queue = ModelQueue("m", model, query_batch_size=8, document_batch_size=2)
    model.hold_documents.clear()
    upload = asyncio.create_task(queue.submit("document", list(range(10))))
    await asyncio.to_thread(model.document_started.wait, 5)
    upload.cancel()
    await asyncio.sleep(0.01)
    model.hold_documents.set()
    with pytest.raises(asyncio.CancelledError):
        await upload
    await queue.submit("query", [1])  # the queue still works
    await asyncio.sleep(0.05)
    documents = [items for lane, items in model.batches if lane == "document"]
    assert documents == [[0, 1]]  # the rest of the upload never ran
    queue.close()


async def test_a_model_error_fails_the_batch_and_the_queue_goes_on(model):
    queue = ModelQueue("m", model, query_batch_size=8, document_batch_size=8)
    model.fail_on = 3
    with pytest.raises(ValueError, match="model failure"):
        await queue.submit("query", [3])
    assert (await queue.submit("query", [4]))[0].tolist() == [8.0]
    queue.close()


async def test_close_fails_what_is_queued_and_refuses_more(model):
    queue = ModelQueue("m", model, query_batch_size=8, document_batch_size=1)
    model.hold_documents.clear()
    running = asyncio.create_task(queue.submit("document", [1]))
    await asyncio.to_thread(model.document_started.wait, 5)
    waiting = asyncio.create_task(queue.submit("document", [2]))
    await asyncio.sleep(0.01)
    queue.close()
    model.hold_documents.set()
    with pytest.raises(RuntimeError, match="closed"):
        await waiting
    assert (await running)[0].tolist() == [2.0]
    with pytest.raises(RuntimeError, match="closed"):
        await queue.submit("query", [1])
