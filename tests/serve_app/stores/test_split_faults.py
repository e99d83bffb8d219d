"""Faults across the two stores of the opensearch+qdrant topology: an injected transport error
at the client boundary (the OpenSearch HTTP connection; the Qdrant client's calls) mid-ingest.
Whatever fails, the call fails, the previous version of each document stays served whole (or
nothing, for a new one), nothing is half visible, and a retry converges with no duplicates."""

from __future__ import annotations

import httpx
import pytest
from opensearchpy import AsyncOpenSearch
from store_helpers import MODELS, FlakyConnection, encoded, opensearch_config, query, write

from serve_app.config import QdrantConfig
from serve_app.errors import ServiceUnavailableError
from serve_app.schemas import ScopeKey
from serve_app.stores.index import StoreIndex
from serve_app.stores.opensearch import OpenSearchBackend
from serve_app.stores.qdrant import QdrantBackend
from serve_app.stores.qdrant.connection import QdrantConnection

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
async def split(tmp_path, opensearch_url):
    FlakyConnection.bulk_budget, FlakyConnection.down = None, False
    FlakyConnection.down_after_bulk_failure = False
    config = opensearch_config(opensearch_url, bulk_batch_size=2, max_retries=0)
    client = AsyncOpenSearch(hosts=config.hosts, connection_class=FlakyConnection, max_retries=0)
    vectors = QdrantBackend(QdrantConnection(
        QdrantConfig(local_path=":memory:", collection="c", upsert_batch_size=2),
        tmp_path,
        strategies=("dense",),
    ))
    store = StoreIndex([OpenSearchBackend(config, client=client), vectors], recovery_timeout_s=5)
    await store.open(MODELS)
    yield store
    FlakyConnection.bulk_budget, FlakyConnection.down = None, False
    await store.close()


def document(doc_id: str, n: int, version: str = "v1"):
    chunks = [
        encoded(
            doc_id, i, f"{doc_id} {version} chunk {i} decay", [1, i, 0, 0], {1: 1.0, 9: 0.5},
            version=version,
        )
        for i in range(n)
    ]  # fmt: skip
    return write(doc_id, chunks, content_hash=f"{doc_id}-{version}")


async def visible(store: StoreIndex, doc_id: str) -> list[str]:
    """Chunk texts of ``doc_id`` that any strategy can return as a final result."""
    q = query(dense=(1, 0.5, 0, 0), terms={1: 1.0, 9: 1.0}, text=f"{doc_id} decay chunk")
    found = await store.search_many(["bm25", "splade", "dense"], q, 100, ScopeKey("t1"))
    ids = list(dict.fromkeys(h.chunk_id for hits in found.values() for h in hits))
    return sorted(c.text for c in await store.fetch(ScopeKey("t1"), ids) if c.doc_id == doc_id)


async def stored(store: StoreIndex) -> tuple[int, int]:
    text, vectors = store.backends
    return await text.count(ScopeKey("t1")), await vectors.count(ScopeKey("t1"))


async def test_opensearch_fails_mid_ingest_then_retry_converges(split):
    FlakyConnection.bulk_budget = 1  # the first bulk batch lands, the second fails
    with pytest.raises(ServiceUnavailableError, match="keep their previous version"):
        await split.write_documents(ScopeKey("t1"), [document("a", 3), document("b", 2)])
    assert await stored(split) == (0, 0)  # the landed batch was rolled back
    assert await visible(split, "a") == [] and await visible(split, "b") == []
    assert await split.document_hashes(ScopeKey("t1"), ["a", "b"]) == {}

    FlakyConnection.bulk_budget = None
    await split.write_documents(ScopeKey("t1"), [document("a", 3), document("b", 2)])
    assert await stored(split) == (5, 5)
    assert len(await visible(split, "a")) == 3
    assert await split.document_hashes(ScopeKey("t1"), ["a", "b"]) == {"a": "a-v1", "b": "b-v1"}


async def test_qdrant_fails_mid_ingest_then_retry_converges(split, monkeypatch):
    qdrant = split.backends[1]
    real_upsert = qdrant.connection.client.upsert
    calls = {"n": 0}

    async def flaky_upsert(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise httpx.ConnectError("injected: Qdrant connection refused")
        return await real_upsert(*args, **kwargs)

    monkeypatch.setattr(qdrant.connection.client, "upsert", flaky_upsert)
    with pytest.raises(ServiceUnavailableError, match="keep their previous version"):
        await split.write_documents(ScopeKey("t1"), [document("a", 3)])
    assert await stored(split) == (0, 0)
    assert await visible(split, "a") == []

    await split.write_documents(ScopeKey("t1"), [document("a", 3)])
    assert await stored(split) == (3, 3) and len(await visible(split, "a")) == 3


async def test_a_failed_update_keeps_the_old_version_even_with_opensearch_gone(split):
    await split.write_documents(ScopeKey("t1"), [document("a", 3)])
    old = await visible(split, "a")
    assert len(old) == 3

    # The update's second bulk batch fails and OpenSearch stays down, so the roll-back cannot
    # reach it: two v2 chunks are left in OpenSearch only.
    FlakyConnection.bulk_budget, FlakyConnection.down_after_bulk_failure = 1, True
    with pytest.raises(ServiceUnavailableError, match="keep their previous version"):
        await split.write_documents(ScopeKey("t1"), [document("a", 4, "v2")])
    FlakyConnection.bulk_budget, FlakyConnection.down = None, False

    assert await stored(split) == (5, 3)  # the leftovers exist ...
    assert await visible(split, "a") == old  # ... in one store only: v1 is served, whole
    assert (
        await split.document_hashes(ScopeKey("t1"), ["a"]) == {}
    )  # two hashes: the retry rewrites

    await split.write_documents(ScopeKey("t1"), [document("a", 4, "v2")])
    assert await stored(split) == (4, 4)
    texts = await visible(split, "a")
    assert len(texts) == 4 and all(" v2 " in t for t in texts)


async def test_a_failed_delete_serves_nothing_and_its_retry_converges(split, monkeypatch):
    await split.write_documents(ScopeKey("t1"), [document("a", 2)])
    qdrant = split.backends[1]

    async def refuse(*args, **kwargs):
        raise httpx.ConnectError("injected")

    monkeypatch.setattr(qdrant.connection.client, "delete", refuse)
    with pytest.raises(ServiceUnavailableError):
        await split.delete_document(ScopeKey("t1"), "a")
    assert await visible(split, "a") == []  # gone from OpenSearch: nothing served
    assert await stored(split) == (0, 2)
    monkeypatch.undo()
    assert await split.delete_document(ScopeKey("t1"), "a") == 0  # nothing was served to remove ...
    assert await stored(split) == (0, 0)  # ... and the leftovers are gone
