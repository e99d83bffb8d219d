"""The retrieval service's ingest admission: shared slots, bounded uploads, sub-batches."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.errors import ServiceUnavailableError
from serve_app.pipelines.components import build_components
from serve_app.schemas import Document, ScopeKey
from serve_app.service import RetrievalService
from serve_app.service.uploads import sub_batches

DEFAULT = ScopeKey("default")


def doc(i: int, chars: int = 100) -> Document:
    return Document(id=f"d{i}", title=f"t{i}", text=("word " * (chars // 5)).strip())


def test_sub_batches_respect_count_and_characters_in_order():
    docs = [doc(i, 1000) for i in range(7)]
    groups = sub_batches(docs, size=3, chars=2500)
    assert [[d.id for d in g] for g in groups] == [["d0", "d1"], ["d2", "d3"], ["d4", "d5"], ["d6"]]
    by_count = sub_batches(docs, size=3, chars=10**9)
    assert [len(g) for g in by_count] == [3, 3, 1]
    assert [len(g) for g in sub_batches([doc(0, 5000), doc(1)], size=8, chars=100)] == [1, 1]


class GatedChunker:
    """The real chunker behind a gate, so uploads stay in progress while the test looks."""

    def __init__(self, chunker) -> None:
        self.chunker = chunker
        self.open = asyncio.Event()
        self.running = 0
        self.most_running = 0

    def fingerprint(self) -> dict:
        return self.chunker.fingerprint()

    async def chunk_many(self, documents):
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await self.open.wait()
            return await self.chunker.chunk_many(documents)
        finally:
            self.running -= 1


@pytest.fixture(scope="module")
async def components(app_config_factory):
    config = app_config_factory(
        api={"ingest_concurrency": 2, "max_pending_uploads": 3, "ingest_batch_size": 1}
    )
    built = await build_components(config)
    yield built
    await built.close()


async def test_uploads_share_the_slots_and_extra_uploads_are_refused(components):
    gate = GatedChunker(components.chunker)
    components.chunker = gate
    service = RetrievalService(components)
    uploads = [
        asyncio.create_task(service.ingest(DEFAULT, [doc(10 * u + i) for i in range(3)]))
        for u in range(3)
    ]
    await asyncio.sleep(0.2)
    # Three uploads of three sub-batches each, but only two sub-batches in the pipeline.
    assert gate.running == 2
    with pytest.raises(ServiceUnavailableError, match="max_pending_uploads"):
        await service.ingest(DEFAULT, [doc(99)])
    gate.open.set()
    results = await asyncio.gather(*uploads)
    assert gate.most_running == 2
    assert sorted(d for r in results for d in r.written) == sorted(
        f"d{10 * u + i}" for u in range(3) for i in range(3)
    )
    assert (await service.ingest(DEFAULT, [doc(99)])).written == ["d99"]  # admitted again
    components.chunker = gate.chunker


class RecordingIndex:
    """The real index, recording which protocol calls the service makes on it."""

    def __init__(self, index) -> None:
        self.index = index
        self.calls: list[str] = []

    def __getattr__(self, name: str):
        member = getattr(self.index, name)
        if not asyncio.iscoroutinefunction(member):
            return member

        async def recorded(*args, **kwargs):
            self.calls.append(name)
            return await member(*args, **kwargs)

        return recorded


async def test_a_search_makes_its_store_calls_in_one_retrieval(components):
    """On Ray Serve every index call the service makes is a store round trip of its own; a
    search's calls are all inside its retrieval (one coalesced round trip): the default
    collection needs no lookup, a named one is confirmed there, and one that does not exist
    is a 404 with nothing searched."""
    from serve_app.errors import NotFoundError
    from serve_app.pipelines.retrieval import IndexRetriever
    from serve_app.schemas import SearchRequest

    tenant = "t-calls"  # the module's other tests write to the default tenant
    index, retriever = components.index, components.retriever
    service_calls, retrieval_calls = RecordingIndex(index), RecordingIndex(index)
    components.index, components.retriever = service_calls, IndexRetriever(retrieval_calls)
    try:
        service = RetrievalService(components)
        await service.ingest(ScopeKey(tenant), [doc(1)])
        service_calls.calls.clear()
        found = await service.search(SearchRequest(query="word", top_k=3), ScopeKey(tenant))
        assert [r.chunk.doc_id for r in found.results] == ["d1"]
        assert service_calls.calls == [] and retrieval_calls.calls == [
            "search_batch",
            "fetch_batch",
        ]

        retrieval_calls.calls.clear()
        with pytest.raises(NotFoundError, match="collection 'papers' not found"):
            await service.search(
                SearchRequest(query="word", collection="papers"), ScopeKey(tenant, "papers")
            )
        assert service_calls.calls == [] and retrieval_calls.calls == ["has_collection"]

        await service.create_collection(ScopeKey(tenant, "papers"))
        await service.ingest(await service.existing(ScopeKey(tenant, "papers")), [doc(2)])
        service_calls.calls.clear()
        retrieval_calls.calls.clear()
        named = await service.search(
            SearchRequest(query="word", collection="papers"), ScopeKey(tenant, "papers")
        )
        assert [r.chunk.doc_id for r in named.results] == ["d2"]
        assert service_calls.calls == []
        assert retrieval_calls.calls == ["has_collection", "search_batch", "fetch_batch"]
    finally:
        components.index, components.retriever = index, retriever
