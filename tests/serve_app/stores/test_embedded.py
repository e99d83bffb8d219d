"""The embedded store on Qdrant's real engine (qdrant-edge), with small hand-made vectors."""

import pytest
from store_helpers import MODELS, encoded, query, write

from serve_app.config import EmbeddedStoreConfig
from serve_app.errors import ModelMismatchError
from serve_app.schemas import SearchFilters, SparseVector
from serve_app.stores.base import ChunkIndex, IndexModels, QueryVectors
from serve_app.stores.embedded import EmbeddedIndex


@pytest.fixture
async def index(tmp_path):
    store = EmbeddedIndex(tmp_path / "idx", EmbeddedStoreConfig(exact=True))
    await store.open(MODELS)
    await store.write_documents(
        "t1",
        [
            write(
                "d1",
                [
                    encoded("d1", 0, "alpha", [1, 0, 0, 0], {1: 1.0, 2: 0.5}),
                    encoded("d1", 1, "beta", [0, 1, 0, 0], {2: 2.0}, section="Methods"),
                ],
            ),
            write(
                "d2",
                [encoded("d2", 0, "gamma", [0.9, 0.1, 0, 0], {1: 0.2}, metadata={"year": 2020})],
            ),
        ],
    )
    await store.write_documents(
        "t2", [write("d1", [encoded("d1", 0, "other tenant", [1, 0, 0, 0], {1: 5.0}, tenant="t2")])]
    )
    yield store
    await store.close()


async def test_protocol_and_counts(index):
    assert isinstance(index, ChunkIndex)
    assert await index.count("t1") == 3
    assert await index.count("t2") == 1
    assert await index.count() == 4


@pytest.mark.parametrize("strategy", ["dense", "splade", "bm25"])
async def test_search_each_strategy_is_tenant_scoped(index, strategy):
    hits = await index.search(strategy, query(), 10, "t1")
    chunks = await index.fetch("t1", [h.chunk_id for h in hits])
    assert hits and all(c.tenant_id == "t1" for c in chunks) and len(chunks) == len(hits)
    assert [c.doc_id for c in chunks] == [h.doc_id for h in hits]
    assert hits[0].doc_id in {"d1", "d2"}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


async def test_dense_exact_ranking(index):
    hits = await index.search("dense", query(), 10, "t1")
    assert [c.text for c in await index.fetch("t1", [h.chunk_id for h in hits])] == [
        "alpha",
        "gamma",
        "beta",
    ]
    assert hits[0].score == pytest.approx(1.0)


async def test_filters(index):
    by_doc = await index.search("dense", query(), 10, "t1", SearchFilters(doc_ids=["d2"]))
    assert [h.doc_id for h in by_doc] == ["d2"]
    by_section = await index.search(
        "splade", query(terms={2: 1.0}), 10, "t1", SearchFilters(sections=["Methods"])
    )
    assert [c.text for c in await index.fetch("t1", [h.chunk_id for h in by_section])] == ["beta"]
    by_meta = await index.search("dense", query(), 10, "t1", SearchFilters(metadata={"year": 2020}))
    assert [c.text for c in await index.fetch("t1", [h.chunk_id for h in by_meta])] == ["gamma"]


async def test_bm25_applies_idf(index):
    # Term 1 is in two chunks of t1 and term 2 in two as well; IDF must make scores differ from raw dot.
    raw = await index.search("splade", query(terms={1: 1.0}), 10, "t1")
    idf = await index.search("bm25", query(terms={1: 1.0}), 10, "t1")
    assert [h.chunk_id for h in raw] == [h.chunk_id for h in idf]
    assert raw[0].score != pytest.approx(idf[0].score)


async def test_replace_removes_stale_chunks_and_keeps_others(index):
    removed = await index.write_documents(
        "t1", [write("d1", [encoded("d1", 0, "alpha v2", [1, 0, 0, 0], {1: 1.0})], "h2")]
    )
    assert removed == 2
    info = await index.document_info("t1", "d1")
    assert info is not None and info.content_hash == "h2" and len(info.chunk_ids) == 1
    assert await index.count("t2") == 1


async def test_hashes_info_and_delete(index):
    assert await index.document_hashes("t1", ["d1", "d2", "missing"]) == {"d1": "h1", "d2": "h1"}
    info = await index.document_info("t1", "d1")
    assert info.title == "title d1" and len(info.chunk_ids) == 2
    assert await index.document_info("t2", "d2") is None
    assert await index.delete_document("t1", "d1") == 2
    assert await index.delete_document("t1", "d1") == 0
    assert await index.count("t1") == 1 and await index.count("t2") == 1


async def test_empty_sparse_query_returns_nothing(index):
    empty = QueryVectors(text="q", splade=SparseVector(indices=[], values=[]))
    assert await index.search("splade", empty, 10, "t1") == []


async def test_persists_and_reopens(tmp_path):
    path = tmp_path / "persist"
    store = EmbeddedIndex(path, EmbeddedStoreConfig())
    await store.open(MODELS)
    await store.write_documents(
        "t1", [write("d1", [encoded("d1", 0, "alpha", [1, 0, 0, 0], {1: 1.0})])]
    )
    await store.close()
    reopened = EmbeddedIndex(path, EmbeddedStoreConfig())
    await reopened.open(MODELS)
    assert await reopened.count("t1") == 1
    (hit,) = (await reopened.search("dense", query(), 5, "t1"))[:1]
    assert (await reopened.fetch("t1", [hit.chunk_id]))[0].text == "alpha"
    await reopened.close()


async def test_model_guard(tmp_path):
    path = tmp_path / "guard"
    store = EmbeddedIndex(path, EmbeddedStoreConfig())
    await store.open(MODELS)
    await store.close()
    other = IndexModels(dense_model="other", dense_dim=4, splade_model="s", bm25_model="b")
    with pytest.raises(ModelMismatchError, match="dense_model: 'm' -> 'other'"):
        await EmbeddedIndex(path, EmbeddedStoreConfig()).open(other)


async def test_bm25_idf_is_per_tenant(tmp_path):
    store = EmbeddedIndex(tmp_path / "idf", EmbeddedStoreConfig(exact=True))
    await store.open(MODELS)
    doc = encoded("d", 0, "x", [1, 0, 0, 0], {7: 1.0, 8: 1.0}, tenant="t1")
    await store.write_documents("t1", [write("d", [doc])])
    await store.write_documents(
        "t1", [write("e", [encoded("e", 0, "y", [0, 1, 0, 0], {8: 1.0}, tenant="t1")])]
    )
    before = (await store.search("bm25", query(terms={7: 1.0}), 5, "t1"))[0].score
    # Another tenant indexing the same term many times must not change t1's BM25 scores.
    noise = [
        write(f"n{i}", [encoded(f"n{i}", 0, "z", [0, 0, 1, 0], {7: 1.0}, tenant="t2")])
        for i in range(20)
    ]
    await store.write_documents("t2", noise)
    after = (await store.search("bm25", query(terms={7: 1.0}), 5, "t1"))[0].score
    assert after == pytest.approx(before)
    await store.close()


async def test_fetch_keeps_order_and_tenant(index):
    hits = await index.search("dense", query(), 10, "t1")
    ids = [h.chunk_id for h in hits]
    assert [c.id for c in await index.fetch("t1", list(reversed(ids)))] == list(reversed(ids))
    assert await index.fetch("t2", ids) == []  # another tenant's ids are not served
    assert await index.fetch("t1", []) == []
    assert await index.fetch("t1", ["00000000-0000-0000-0000-000000000000"]) == []
