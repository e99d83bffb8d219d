"""The ``ServedIndex`` contract as pytest mixins (Haystack's document-store test mixins are
the model): subclass ``StoreContract`` in a test module and give it a ``store`` fixture, an
opened index (``MODELS``) that tests may share: each test writes under tenants of its own.

    class TestMyTopology(StoreContract):
        @pytest.fixture
        async def store(self, tmp_path):
            index = build_my_topology(tmp_path)
            await index.open(MODELS)
            yield index
            await index.close()

Small hand-made vectors (4 dimensions; sparse ids as terms) make every expected ranking and
score exact. BM25 differs by design between stores (vectors with IDF, or analysed text), so
it is tested per topology, not here.
"""

from __future__ import annotations

import hashlib
import uuid

import numpy as np
import pytest

from serve_app.schemas import Chunk, ScopeKey, SearchFilters, SparseVector
from serve_app.stores.one_query import fetch, search, search_many
from serve_app.stores.protocols import ServedIndex
from serve_app.stores.values import (
    DocumentWrite,
    EncodedChunk,
    IndexModels,
    QueryVectors,
    SearchQuery,
)

MODELS = IndexModels(dense_model="m", dense_dim=4, splade_model="s", bm25_model="b")



def chunk_uuid(*parts: object) -> str:
    digest = hashlib.sha1("\x1f".join(map(str, parts)).encode()).hexdigest()
    return str(uuid.UUID(digest[:32]))


def encoded(
    doc_id: str,
    order: int,
    text: str,
    dense: list[float],
    terms: dict[int, float],
    tenant: ScopeKey | str = "t1",
    section: str = "Intro",
    metadata: dict | None = None,
    version: str = "",
    collection: str = "default",
) -> EncodedChunk:
    """A chunk with its vectors (``terms`` serve as SPLADE and BM25 weights). ``version`` goes
    into the chunk id, as the ingest pipeline puts the content hash there; so do the tenant
    and collection, as it puts the scope there."""
    chunk = Chunk(
        id=chunk_uuid(tenant, collection, doc_id, order, text, version),
        doc_id=doc_id,
        text=text,
        title=f"title {doc_id}",
        section=section,
        heading_chain=[section],
        order=order,
        char_start=0,
        char_end=len(text),
        metadata=metadata or {},
    )
    sparse = SparseVector(indices=list(terms), values=list(terms.values()))
    return EncodedChunk(
        chunk=chunk, dense=np.array(dense, dtype=np.float32), splade=sparse, bm25=sparse
    )


def write(doc_id: str, chunks: list[EncodedChunk], content_hash: str = "h1") -> DocumentWrite:
    return DocumentWrite(doc_id=doc_id, content_hash=content_hash, chunks=chunks)


def query(dense=(1, 0, 0, 0), terms=None, text: str = "q") -> QueryVectors:
    terms = terms or {1: 1.0}
    sparse = SparseVector(indices=list(terms), values=list(terms.values()))
    return QueryVectors(
        text=text, dense=np.array(dense, dtype=np.float32), splade=sparse, bm25=sparse
    )


def corpus(t1: ScopeKey, t2: ScopeKey) -> list[tuple[ScopeKey, list[DocumentWrite]]]:
    """Two documents (three chunks) in ``t1``, one chunk of another ``d1`` in ``t2``."""
    return [
        (
            t1,
            [
                write(
                    "d1",
                    [
                        encoded(
                            "d1", 0, "alpha particles decay", [1, 0, 0, 0], {1: 1.0, 2: 0.5}, t1
                        ),
                        encoded(
                            "d1", 1, "beta decay of neutrons", [0, 1, 0, 0], {2: 2.0}, t1, "Methods"
                        ),
                    ],
                ),
                write(
                    "d2",
                    [
                        encoded(
                            "d2", 0, "gamma rays", [0.9, 0.1, 0, 0], {1: 0.2}, t1,
                            metadata={"year": 2020},
                        )
                    ],
                ),
            ],
        ),
        (t2, [write("d1", [encoded("d1", 0, "alpha other tenant", [1, 0, 0, 0], {1: 5.0}, t2)])]),
    ]  # fmt: skip


@pytest.mark.asyncio(loop_scope="session")
class StoreContract:
    """Every behaviour a ``ServedIndex`` promises, on tenants of each test's own (the
    one-query reads go through the batched ones, as the serving path's do)."""

    @pytest.fixture
    def tenants(self) -> tuple[ScopeKey, ScopeKey]:
        tag = uuid.uuid4().hex[:8]
        return ScopeKey(f"t1-{tag}"), ScopeKey(f"t2-{tag}")

    @pytest.fixture
    async def filled(self, store, tenants) -> tuple[ServedIndex, ScopeKey, ScopeKey]:
        for tenant, writes in corpus(*tenants):
            await store.write_documents(tenant, writes)
        return store, *tenants

    @staticmethod
    async def texts(store: ServedIndex, tenant: ScopeKey, hits) -> list[str]:
        return [c.text for c in await fetch(store, tenant, [h.chunk_id for h in hits])]

    async def test_a_collection_created_again_starts_empty(self, store, tenants):
        """A write admitted just before a collection was deleted can land after the
        delete's sweep; a collection created again under that name must not show it."""
        t1, _ = tenants
        key = ScopeKey(t1.tenant, "again")
        await store.create_collection(key)
        assert await store.has_collection(key)
        await store.delete_collection(key)
        late = encoded("late", 0, "late words", [1, 0, 0, 0], {1: 1.0}, t1, collection="again")
        await store.write_documents(key, [write("late", [late])])
        assert await store.count(key) == 1
        created = await store.create_collection(key)
        assert created["state"] == "ready" and await store.has_collection(key)
        assert await store.count(key) == 0
        assert await search(store, "dense", query(), 5, key) == []
        await store.delete_collection(key)

    async def test_protocol_health_and_counts(self, filled):
        store, t1, t2 = filled
        assert isinstance(store, ServedIndex) and await store.healthy()
        assert (await store.count(t1), await store.count(t2)) == (3, 1)

    @pytest.mark.parametrize("strategy", ["dense", "splade"])
    async def test_search_is_tenant_scoped_and_ordered(self, filled, strategy):
        store, t1, _ = filled
        hits = await search(store, strategy, query(), 10, t1)
        chunks = await fetch(store, t1, [h.chunk_id for h in hits])
        assert hits and len(chunks) == len(hits)
        assert [c.doc_id for c in chunks] == [h.doc_id for h in hits]
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

    async def test_dense_ranking_is_exact(self, filled):
        store, t1, _ = filled
        hits = await search(store, "dense", query(), 10, t1)
        assert await self.texts(store, t1, hits) == [
            "alpha particles decay",
            "gamma rays",
            "beta decay of neutrons",
        ]
        assert hits[0].score == pytest.approx(1.0, abs=1e-6)

    async def test_splade_is_the_dot_product(self, filled):
        store, t1, _ = filled
        hits = await search(store, "splade", query(terms={1: 1.0, 2: 1.0}), 10, t1)
        got = dict(zip(await self.texts(store, t1, hits), (h.score for h in hits), strict=True))
        # rank_features keep about 9 significant bits in Lucene: allow 1 % relative.
        assert got == pytest.approx(
            {"beta decay of neutrons": 2.0, "alpha particles decay": 1.5, "gamma rays": 0.2},
            rel=0.01,
        )

    async def test_filters_apply_inside_each_strategy(self, filled):
        store, t1, _ = filled
        by_doc = await search(store, "dense", query(), 10, t1, SearchFilters(doc_ids=["d2"]))
        assert [h.doc_id for h in by_doc] == ["d2"]
        by_section = await search(store, 
            "splade", query(terms={2: 1.0}), 10, t1, SearchFilters(sections=["Methods"])
        )
        assert await self.texts(store, t1, by_section) == ["beta decay of neutrons"]
        by_meta = await search(store, 
            "dense", query(), 10, t1, SearchFilters(metadata={"year": 2020})
        )
        assert await self.texts(store, t1, by_meta) == ["gamma rays"]
        none = await search(store, "splade", query(), 10, t1, SearchFilters(metadata={"year": 1999}))
        assert none == []

    async def test_a_replace_removes_the_old_chunks_and_keeps_other_documents(self, filled):
        store, t1, t2 = filled
        new = write(
            "d1", [encoded("d1", 0, "alpha v2", [1, 0, 0, 0], {1: 1.0}, t1, version="h2")], "h2"
        )
        assert await store.write_documents(t1, [new]) == 2
        info = await store.document_info(t1, "d1")
        assert info is not None and info.content_hash == "h2" and len(info.chunk_ids) == 1
        assert (await store.count(t1), await store.count(t2)) == (2, 1)
        assert await store.document_hashes(t1, ["d1"]) == {"d1": "h2"}
        hits = await search(store, "dense", query(), 10, t1, SearchFilters(doc_ids=["d1"]))
        assert await self.texts(store, t1, hits) == ["alpha v2"]

    async def test_reingest_is_idempotent(self, filled):
        store, t1, t2 = filled
        (_, writes), _ = corpus(t1, t2)
        assert await store.write_documents(t1, writes) == 0
        assert await store.count(t1) == 3
        hits = await search(store, "dense", query(), 10, t1)
        assert len({h.chunk_id for h in hits}) == len(hits) == 3

    async def test_hashes_info_and_delete(self, filled):
        store, t1, t2 = filled
        assert await store.document_hashes(t1, ["d1", "d2", "missing"]) == {"d1": "h1", "d2": "h1"}
        assert await store.document_hashes(t1, []) == {}
        info = await store.document_info(t1, "d1")
        assert info.title == "title d1" and len(info.chunk_ids) == 2 and info.tenant_id == t1.tenant
        assert await store.document_info(t2, "d2") is None
        assert await store.delete_document(t1, "d1") == 2
        assert await store.delete_document(t1, "d1") == 0
        assert (await store.count(t1), await store.count(t2)) == (1, 1)
        assert await search(store, "dense", query(), 10, t1, SearchFilters(doc_ids=["d1"])) == []
        assert await store.document_info(t1, "d1") is None

    async def test_an_empty_sparse_query_returns_nothing(self, filled):
        store, t1, _ = filled
        empty = QueryVectors(text="", splade=SparseVector(indices=[], values=[]))
        assert await search(store, "splade", empty, 10, t1) == []

    async def test_fetch_keeps_order_and_tenant(self, filled):
        store, t1, t2 = filled
        ids = [h.chunk_id for h in await search(store, "dense", query(), 10, t1)]
        assert [c.id for c in await fetch(store, t1, list(reversed(ids)))] == list(reversed(ids))
        assert await fetch(store, t2, ids) == []
        assert await fetch(store, t1, []) == []
        assert await fetch(store, t1, ["00000000-0000-0000-0000-000000000000"]) == []

    async def test_search_many_answers_every_strategy(self, filled):
        store, t1, _ = filled
        results = await search_many(store, ["dense", "splade"], query(), 10, t1)
        assert set(results) == {"dense", "splade"} and all(results.values())
        assert results["dense"] == await search(store, "dense", query(), 10, t1)

    async def test_a_batch_answers_each_query_as_alone(self, filled):
        store, t1, t2 = filled
        queries = [
            SearchQuery(["dense", "splade"], query(), 10, t1),
            SearchQuery(
                ["splade"], query(terms={2: 1.0}), 2, t1, SearchFilters(sections=["Methods"])
            ),
            SearchQuery(["dense"], query(dense=(0, 1, 0, 0)), 10, t2),
            SearchQuery(["dense", "splade"], query(), 10, ScopeKey("nobody")),
        ]
        batch = await store.search_batch(queries)
        alone = [
            await search_many(store, q.strategies, q.query, q.limit, q.scope, q.filters)
            for q in queries
        ]
        assert batch == alone
        assert batch[3] == {"dense": [], "splade": []}

    async def test_hits_without_document_ids_are_the_same_hits(self, filled):
        store, t1, _ = filled
        (with_ids, without) = await store.search_batch(
            [
                SearchQuery(["dense", "splade"], query(), 10, t1),
                SearchQuery(["dense", "splade"], query(), 10, t1, doc_ids=False),
            ]
        )
        for strategy in ("dense", "splade"):
            assert [(h.chunk_id, h.score) for h in without[strategy]] == [
                (h.chunk_id, h.score) for h in with_ids[strategy]
            ]
            assert all(h.doc_id for h in with_ids[strategy])

    async def test_a_fetch_batch_keeps_each_tenant_apart(self, filled):
        store, t1, t2 = filled
        ids1 = [h.chunk_id for h in await search(store, "dense", query(), 10, t1)]
        ids2 = [h.chunk_id for h in await search(store, "dense", query(), 10, t2)]
        first, second, crossed = await store.fetch_batch([(t1, ids1), (t2, ids2), (t2, ids1)])
        assert [c.id for c in first] == ids1 and [c.id for c in second] == ids2
        assert crossed == []

    async def test_documents_are_listed_page_by_page_in_their_scope(self, store, tenants):
        t1, t2 = tenants
        metadata = {"year": 2020, "imrad": "methods"}  # imrad labels chunks, not documents
        writes = [
            write(f"doc{n}", [encoded(f"doc{n}", o, f"{n} {o}", [1, 0, 0, 0], {1: 1.0}, t1,
                                      metadata=metadata) for o in range(n % 3 + 1)],
                  content_hash=f"h{n}")
            for n in range(7)
        ]  # fmt: skip
        await store.write_documents(t1, writes)
        await store.write_documents(t2, [write("other", [encoded("other", 0, "x", [1, 0, 0, 0], {}, t2)])])
        await store.delete_document(t1, "doc3")
        pages, cursor, listed = 0, None, []
        while pages == 0 or cursor is not None:
            page = await store.list_documents(t1, cursor, 2)
            assert len(page.documents) <= 2
            listed += page.documents
            cursor, pages = page.next_cursor, pages + 1
            assert pages <= 5, "the cursor must move on"
        assert pages >= 3  # six documents, two a page
        assert sorted(d.id for d in listed) == ["doc0", "doc1", "doc2", "doc4", "doc5", "doc6"]
        by_id = {d.id: d for d in listed}
        assert by_id["doc5"].chunk_count == 3 and by_id["doc5"].content_hash == "h5"
        assert by_id["doc4"].title == "title doc4" and by_id["doc4"].metadata == {"year": 2020}
        assert [d.id for d in (await store.list_documents(t2, None, 10)).documents] == ["other"]
        assert (await store.list_documents(ScopeKey(t1.tenant, "none"), None, 10)).documents == []
