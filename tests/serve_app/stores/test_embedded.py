"""What is particular to the embedded store (Qdrant's engine in process, qdrant-edge): BM25 as
vectors with IDF from the tenant's own chunks, persistence, the model guard of its directory,
and a replace interrupted between the write and the removal of the old chunks."""

import pytest
import qdrant_edge as edge
from store_helpers import MODELS, encoded, query, write

from serve_app.config import EmbeddedStoreConfig
from serve_app.errors import ModelMismatchError
from serve_app.schemas import ScopeKey
from serve_app.stores.embedded import REGISTRY_FILE, EdgeBackend, embedded_index
from serve_app.stores.values import IndexModels


@pytest.fixture
async def index(tmp_path):
    store = embedded_index(tmp_path / "idx", EmbeddedStoreConfig(exact=True))
    await store.open(MODELS)
    yield store
    await store.close()


async def test_bm25_applies_idf(index):
    await index.write_documents(
        ScopeKey("t1"),
        [
            write("d1", [encoded("d1", 0, "alpha", [1, 0, 0, 0], {1: 1.0, 2: 0.5})]),
            write("d2", [encoded("d2", 0, "gamma", [0, 1, 0, 0], {1: 0.2, 3: 1.0})]),
            write("d3", [encoded("d3", 0, "delta", [0, 0, 1, 0], {3: 1.0})]),
        ],
    )
    raw = await index.search("splade", query(terms={1: 1.0}), 10, ScopeKey("t1"))
    idf = await index.search("bm25", query(terms={1: 1.0}), 10, ScopeKey("t1"))
    assert [h.chunk_id for h in raw] == [h.chunk_id for h in idf]
    assert raw[0].score != pytest.approx(idf[0].score)


async def test_bm25_idf_is_per_tenant(index):
    await index.write_documents(
        ScopeKey("t1"),
        [
            write("d", [encoded("d", 0, "x", [1, 0, 0, 0], {7: 1.0, 8: 1.0})]),
            write("e", [encoded("e", 0, "y", [0, 1, 0, 0], {8: 1.0})]),
        ],
    )
    before = (await index.search("bm25", query(terms={7: 1.0}), 5, ScopeKey("t1")))[0].score
    # Another tenant indexing the same term many times must not change t1's BM25 scores.
    noise = [
        write(f"n{i}", [encoded(f"n{i}", 0, "z", [0, 0, 1, 0], {7: 1.0}, tenant="t2")])
        for i in range(20)
    ]
    await index.write_documents(ScopeKey("t2"), noise)
    after = (await index.search("bm25", query(terms={7: 1.0}), 5, ScopeKey("t1")))[0].score
    assert after == pytest.approx(before)


async def test_persists_and_reopens(tmp_path):
    path = tmp_path / "persist"
    store = embedded_index(path, EmbeddedStoreConfig())
    await store.open(MODELS)
    await store.write_documents(
        ScopeKey("t1"), [write("d1", [encoded("d1", 0, "alpha", [1, 0, 0, 0], {1: 1.0})])]
    )
    await store.close()
    reopened = embedded_index(path, EmbeddedStoreConfig())
    await reopened.open(MODELS)
    assert await reopened.count(ScopeKey("t1")) == 1
    (hit,) = (await reopened.search("dense", query(), 5, ScopeKey("t1")))[:1]
    assert (await reopened.fetch(ScopeKey("t1"), [hit.chunk_id]))[0].text == "alpha"
    await reopened.close()


async def test_model_guard(tmp_path):
    path = tmp_path / "guard"
    store = embedded_index(path, EmbeddedStoreConfig())
    await store.open(MODELS)
    await store.close()
    other = IndexModels(dense_model="other", dense_dim=4, splade_model="s", bm25_model="b")
    with pytest.raises(ModelMismatchError, match="dense_model: recorded 'm', configured 'other'"):
        await embedded_index(path, EmbeddedStoreConfig()).open(other)


async def test_an_interrupted_replace_is_not_unchanged_and_its_retry_removes_the_old(index):
    """New chunks written, the old ones' removal never run (the process died in between):
    the document has chunks under two hashes, so it is not reported stored under the new
    hash, the ingest writes it again, and that removes the old chunks."""
    old = write("d", [encoded("d", i, f"old {i}", [1, 0, 0, 0], {1: 1.0}, version="h1") for i in range(3)], "h1")  # fmt: skip
    new = write("d", [encoded("d", i, f"new {i}", [1, 0, 0, 0], {1: 1.0}, version="h2") for i in range(2)], "h2")  # fmt: skip
    await index.write_documents(ScopeKey("t1"), [old])
    (backend,) = index.backends
    await backend.upsert(ScopeKey("t1"), [new])  # the write, without what follows it
    assert await index.count(ScopeKey("t1")) == 5
    assert (
        await index.document_hashes(ScopeKey("t1"), ["d"]) == {}
    )  # neither version is whole alone
    assert await index.write_documents(ScopeKey("t1"), [new]) == 3  # the retry
    assert await index.document_hashes(ScopeKey("t1"), ["d"]) == {"d": "h2"}
    hits = await index.search("dense", query(), 10, ScopeKey("t1"))
    assert sorted(await _texts(index, hits)) == ["new 0", "new 1"]


async def _texts(index, hits):
    return [c.text for c in await index.fetch(ScopeKey("t1"), [h.chunk_id for h in hits])]


def test_id_texts_give_the_canonical_text_of_each_id_and_stay_bounded():
    import uuid

    from serve_app.stores.embedded import IdTexts

    texts = IdTexts(limit=3)
    ids = [uuid.uuid5(uuid.NAMESPACE_URL, f"chunk-{i}") for i in range(5)]
    assert [texts(i) for i in ids] == [str(i) for i in ids]
    assert len(texts) == 2  # emptied when the fourth id came, then two more
    again = texts(uuid.UUID(str(ids[4])))  # another object for the same id
    assert again == str(ids[4]) and again is texts(ids[4])
    assert texts(7) == "7" and texts("not-a-uuid") == "not-a-uuid"


def test_id_texts_of_many_ids_match_one_at_a_time():
    import uuid

    from serve_app.stores.embedded import IdTexts

    ids = [uuid.uuid5(uuid.NAMESPACE_URL, f"chunk-{i}") for i in range(4)]
    texts = IdTexts()
    assert texts.many(ids[:2]) == [str(i) for i in ids[:2]]  # unseen: formatted, kept
    assert len(texts) == 2
    seen_and_new = [uuid.UUID(str(ids[0])), ids[2], ids[1]]
    assert texts.many(seen_and_new) == [str(ids[0]), str(ids[2]), str(ids[1])]
    assert texts.many([ids[3], 7, "not-a-uuid"]) == [str(ids[3]), "7", "not-a-uuid"]
    assert texts.many([]) == []


async def test_search_hits_carry_the_ids_the_chunks_were_written_with(index):
    chunks = [encoded(f"d{i}", 0, f"text {i}", [1, i, 0, 0], {1: 1.0 + i}) for i in range(6)]
    await index.write_documents(ScopeKey("t1"), [write(c.chunk.doc_id, [c]) for c in chunks])
    first = await index.search("dense", query(), 10, ScopeKey("t1"))
    second = await index.search("dense", query(), 10, ScopeKey("t1"))  # ids seen before
    assert sorted(h.chunk_id for h in first) == sorted(c.chunk.id for c in chunks)
    assert first == second and all(type(h.chunk_id) is str for h in first)


@pytest.mark.parametrize("reopen", ["open", "attach"])
async def test_opening_an_index_builds_what_its_writes_left_unindexed(tmp_path, reopen):
    """qdrant-edge optimizes only when asked: an index whose dense vectors the writes left
    without their HNSW graph gets it when the store opens it, before it serves."""
    path = tmp_path / "unoptimized"
    store = embedded_index(path, EmbeddedStoreConfig())
    await store.open(MODELS)
    docs = [
        write(f"d{n}", [encoded(f"d{n}", 0, f"t{n}", [1, n, 0, 1], {n: 1.0})]) for n in range(200)
    ]
    await store.write_documents(ScopeKey("t1"), docs)
    await store.close()
    # The engine's threshold lowered afterwards, so that these 200 points are due a graph.
    shard_path = str(path / "shard")
    own = EdgeBackend(path, EmbeddedStoreConfig()).connection._edge_config(MODELS)
    lowered = edge.EdgeConfig(
        vectors=own.vectors,
        sparse_vectors=own.sparse_vectors,
        optimizers=edge.EdgeOptimizersConfig(indexing_threshold=1),
    )
    edge.EdgeShard.load(shard_path, lowered).close()
    raw = edge.EdgeShard.load(shard_path)
    written = raw.info()
    raw.close()
    assert written.indexed_vectors_count < 3 * written.points_count  # dense not indexed yet

    reopened = embedded_index(path, EmbeddedStoreConfig())
    await (reopened.open(MODELS) if reopen == "open" else reopened.attach())
    opened = reopened.backends[0].connection.shard.info()
    assert opened.indexed_vectors_count == 3 * opened.points_count == 3 * written.points_count
    assert await reopened.search("dense", query(), 5, ScopeKey("t1"))
    await reopened.close()


async def test_the_registry_is_parsed_once_until_it_changes(index, tmp_path, monkeypatch):
    """A named-collection lookup costs a stat, not a read and parse of the whole registry
    file (issue 57); a write here and a file replaced from outside (a restore) are seen."""
    import json

    from serve_app.stores.embedded import registry as module

    parses = []
    real_loads = json.loads
    monkeypatch.setattr(module.json, "loads", lambda text: parses.append(1) or real_loads(text))
    key = ScopeKey("t1", "papers")
    await index.create_collection(key)
    parses.clear()
    for _ in range(50):
        assert await index.has_collection(key)
    assert len(parses) <= 1, len(parses)
    await index.create_collection(ScopeKey("t1", "notes"))
    assert await index.has_collection(ScopeKey("t1", "notes"))
    # A registry file replaced from outside: its new stat makes the next lookup re-read it.
    path = tmp_path / "idx" / REGISTRY_FILE
    registry = real_loads(path.read_text())
    del registry["tenants"]["t1"]["papers"]
    staged = path.with_suffix(".outside")
    staged.write_text(json.dumps(registry))
    staged.replace(path)
    assert not await index.has_collection(key)
    assert await index.has_collection(ScopeKey("t1", "notes"))
