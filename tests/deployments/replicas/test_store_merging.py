"""The store replica merges concurrent ``retrieve_many`` calls (from every ingress replica)
into one search and one fetch, and hands each caller its own answers. The replica's class
runs here without Ray, over a real embedded index."""

from __future__ import annotations

import asyncio

import pytest

from deployments.replicas.store import StoreDeployment
from deployments.settings import service_config
from serve_app.pipelines.retrieval import RetrieveSpec
from serve_app.schemas import FusionSpec, ScopeKey
from serve_app.testing.store_contract import MODELS, corpus, query


async def open_replica(config) -> object:
    replica_class = StoreDeployment.func_or_class
    replica = object.__new__(replica_class)
    await replica_class.__init__(replica, service_config(config), MODELS.as_dict())
    for tenant, writes in corpus(ScopeKey("t1"), ScopeKey("t2")):
        await replica.index.write_documents(tenant, writes)
    return replica


def spec(tenant: str, dense: tuple, terms: dict | None = None) -> RetrieveSpec:
    return RetrieveSpec(
        query=query(dense=dense, terms=terms),
        strategies=["bm25", "splade", "dense"],
        limit=10,
        scope=ScopeKey(tenant),
        fusion=FusionSpec(method="rrf", k=60),
        fetch=2,
    )


# Python calls the replica's ``async def __del__`` (Serve awaits it) on collection, unawaited.
@pytest.mark.filterwarnings("ignore:coroutine 'StoreDeployment.__del__':RuntimeWarning")
async def test_concurrent_calls_share_one_search_and_each_gets_its_own_answers(
    app_config_factory,
):
    replica = await open_replica(app_config_factory(stores={"topology": "embedded"}))
    searches: list[int] = []
    search_batch = replica.index.search_batch

    async def counted(queries):
        searches.append(len(queries))
        return await search_batch(queries)

    replica.index.search_batch = counted
    try:
        calls = [
            [spec("t1", (1, 0, 0, 0))],
            [spec("t2", (1, 0, 0, 0)), spec("t1", (0, 1, 0, 0), {2: 1.0})],
            [spec("t1", (0.9, 0.1, 0, 0))],
        ]
        answers = await asyncio.gather(*(replica.retrieve_many(c) for c in calls))
        assert searches == [4]  # three calls, one engine search
        alone = [await replica.retriever.retrieve_many(c) for c in calls]
        assert searches == [4, 1, 2, 1]
        for merged, single in zip(answers, alone, strict=True):
            assert len(merged) == len(single)
            for a, b in zip(merged, single, strict=True):
                assert [c.chunk.id for c in a.candidates] == [c.chunk.id for c in b.candidates]
                assert [c.ranks for c in a.candidates] == [c.ranks for c in b.candidates]
        # Tenants stay apart inside a merged batch: t2's call saw only t2's chunk.
        assert [c.chunk.text for c in answers[1][0].candidates] == ["alpha other tenant"]
        assert answers[1][1].candidates[0].chunk.text == "beta decay of neutrons"
    finally:
        await replica.__del__()  # the replica's own shutdown: closes the index
