"""Faults across the two stores of the opensearch+qdrant topology: an injected transport error
at the client boundary (the OpenSearch HTTP connection; the Qdrant client's upsert) mid-ingest.
Whatever fails, the call fails, no part of a document is visible to search afterwards, and a
retry converges with no duplicates."""

from __future__ import annotations

import httpx
import pytest
from opensearchpy import AsyncOpenSearch
from store_helpers import MODELS, FlakyConnection, encoded, opensearch_config, query, write

from serve_app.config import QdrantConfig
from serve_app.errors import ServiceUnavailableError
from serve_app.stores.opensearch_store import OpenSearchIndex
from serve_app.stores.qdrant_store import QdrantIndex
from serve_app.stores.split import SplitIndex

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
async def split(tmp_path, opensearch_url):
    FlakyConnection.bulk_budget, FlakyConnection.down = None, False
    FlakyConnection.down_after_bulk_failure = False
    config = opensearch_config(opensearch_url, bulk_batch_size=2, max_retries=0)
    client = AsyncOpenSearch(hosts=config.hosts, connection_class=FlakyConnection, max_retries=0)
    vectors = QdrantIndex(
        QdrantConfig(local_path=":memory:", collection="c", upsert_batch_size=2),
        tmp_path,
        strategies=("dense",),
    )
    store = SplitIndex(OpenSearchIndex(config, client=client), vectors)
    await store.open(MODELS)
    yield store
    FlakyConnection.bulk_budget, FlakyConnection.down = None, False
    await store.close()


def document(doc_id: str, n: int, version: str = "v1"):
    chunks = [
        encoded(doc_id, i, f"{doc_id} {version} chunk {i} decay", [1, i, 0, 0], {1: 1.0, 9: 0.5})
        for i in range(n)
    ]
    return write(doc_id, chunks, content_hash=f"{doc_id}-{version}")


async def visible(store: SplitIndex, doc_id: str) -> list[str]:
    """Chunk texts of ``doc_id`` that any strategy can return as a final result."""
    q = query(dense=(1, 0.5, 0, 0), terms={1: 1.0, 9: 1.0}, text=f"{doc_id} decay chunk")
    found = await store.search_many(["bm25", "splade", "dense"], q, 100, "t1")
    ids = list(dict.fromkeys(h.chunk_id for hits in found.values() for h in hits))
    return sorted(c.text for c in await store.fetch("t1", ids) if c.doc_id == doc_id)


async def stored(store: SplitIndex) -> tuple[int, int]:
    return await store.text.count("t1"), await store.vectors.count("t1")


async def test_opensearch_fails_mid_ingest_then_retry_converges(split):
    FlakyConnection.bulk_budget = 1  # the first bulk batch lands, the second fails
    with pytest.raises(ServiceUnavailableError, match="withdrawn"):
        await split.write_documents("t1", [document("a", 3), document("b", 2)])
    assert await stored(split) == (0, 0)
    assert await visible(split, "a") == [] and await visible(split, "b") == []
    assert await split.document_hashes("t1", ["a", "b"]) == {}

    FlakyConnection.bulk_budget = None
    await split.write_documents("t1", [document("a", 3), document("b", 2)])
    assert await stored(split) == (5, 5)
    assert len(await visible(split, "a")) == 3
    assert await split.document_hashes("t1", ["a", "b"]) == {"a": "a-v1", "b": "b-v1"}


async def test_qdrant_fails_mid_ingest_then_retry_converges(split, monkeypatch):
    real_upsert = split.vectors.client.upsert
    calls = {"n": 0}

    async def flaky_upsert(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise httpx.ConnectError("injected: Qdrant connection refused")
        return await real_upsert(*args, **kwargs)

    monkeypatch.setattr(split.vectors.client, "upsert", flaky_upsert)
    with pytest.raises(ServiceUnavailableError, match="withdrawn"):
        await split.write_documents("t1", [document("a", 3)])
    assert await stored(split) == (0, 0)
    assert await visible(split, "a") == []

    await split.write_documents("t1", [document("a", 3)])
    assert await stored(split) == (3, 3) and len(await visible(split, "a")) == 3


async def test_failed_update_with_opensearch_gone_leaves_nothing_half_visible(split):
    await split.write_documents("t1", [document("a", 3)])
    assert len(await visible(split, "a")) == 3

    # The update's second bulk batch fails and OpenSearch stays down, so the withdrawal cannot
    # reach it: some v2 chunks are left in OpenSearch only, and Qdrant's copy was withdrawn.
    FlakyConnection.bulk_budget, FlakyConnection.down_after_bulk_failure = 1, True
    with pytest.raises(ServiceUnavailableError):
        await split.write_documents("t1", [document("a", 4, "v2")])
    FlakyConnection.bulk_budget, FlakyConnection.down = None, False

    text_count, vector_count = await stored(split)
    assert text_count > 0 and vector_count == 0  # the leftovers exist ...
    assert await visible(split, "a") == []  # ... but are in one store only: never served
    assert await split.document_hashes("t1", ["a"]) == {}  # so the retry rewrites

    await split.write_documents("t1", [document("a", 4, "v2")])
    assert await stored(split) == (4, 4)
    texts = await visible(split, "a")
    assert len(texts) == 4 and all(" v2 " in t for t in texts)


async def test_delete_is_ordered_and_retryable(split, monkeypatch):
    await split.write_documents("t1", [document("a", 2)])

    async def refuse(*args, **kwargs):
        raise httpx.ConnectError("injected")

    monkeypatch.setattr(split.vectors.client, "delete", refuse)
    with pytest.raises(ServiceUnavailableError):
        await split.delete_document("t1", "a")
    assert await visible(split, "a") == []  # gone from OpenSearch first: nothing served
    monkeypatch.undo()
    assert await split.delete_document("t1", "a") == 2
    assert await stored(split) == (0, 0)
