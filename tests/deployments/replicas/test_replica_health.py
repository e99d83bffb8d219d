"""Serve's health check of a model deployment asks the model it holds: a replica whose model
can no longer answer (its queue closed, a worker thread gone) fails it, and Serve replaces
the replica. The replicas' classes run here without Ray, over the small real models."""

from __future__ import annotations

import asyncio
import threading

import pytest

from deployments.replicas.dense import DenseDeployment
from deployments.replicas.reranker import RerankerDeployment
from deployments.replicas.splade import SpladeDeployment
from deployments.settings import service_config
from serve_app.encoders.queue import ModelQueue
from serve_app.errors import ServiceUnavailableError


class _Crash(BaseException):
    """What no ``except Exception`` catches: the worker thread dies of it."""


async def test_a_queue_is_unhealthy_once_closed_or_once_a_worker_thread_is_gone():
    def run(_lane, items):
        if items == ["crash"]:
            raise _Crash
        return items, {}

    queue = ModelQueue("probe", run, 4, 4)
    outputs, _ = await queue.submit("query", ["a"])
    assert outputs == ["a"]
    queue.check_health()
    hook, threading.excepthook = threading.excepthook, lambda _args: None
    try:
        waiting = asyncio.ensure_future(queue.submit("document", ["crash"]))
        for _ in range(200):
            if "document" in queue._threads and not queue._threads["document"].is_alive():
                break
            await asyncio.sleep(0.01)
    finally:
        threading.excepthook = hook
    with pytest.raises(ServiceUnavailableError, match="document worker thread is gone"):
        queue.check_health()
    waiting.cancel()
    queue.close()
    with pytest.raises(ServiceUnavailableError, match="closed"):
        queue.check_health()


@pytest.mark.parametrize("replica_class", [DenseDeployment, SpladeDeployment, RerankerDeployment])
async def test_a_model_replica_fails_its_health_check_once_its_model_cannot_answer(
    replica_class, app_config_factory, tiny_reranker_dir
):
    config = service_config(
        app_config_factory(reranker={"enabled": True, "model": str(tiny_reranker_dir)})
    )
    replica = replica_class.func_or_class(config)
    await replica.check_health()  # loaded: healthy
    replica.model.close()  # what Serve's shutdown, or a dead engine, leaves behind
    with pytest.raises(ServiceUnavailableError, match="closed"):
        await replica.check_health()
