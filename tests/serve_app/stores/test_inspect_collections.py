"""Inspection and named collections on every topology, on real engines (qdrant-edge,
qdrant-client local mode, osmem-server): what ``inspect`` reports per store and per (tenant,
collection), collections kept apart inside a tenant, and a collection delete that leaves no
chunk of it in any store (finished by a retry when a store fails midway)."""

from __future__ import annotations

import uuid

import pytest
from store_helpers import MODELS, TOPOLOGY_NAMES, encoded, make_store, query, write

from serve_app.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    ServiceUnavailableError,
)
from serve_app.schemas import ScopeKey
from serve_app.stores.values import PAYLOAD_INDEXES

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture(params=TOPOLOGY_NAMES)
async def store(request, tmp_path):
    url = request.getfixturevalue("opensearch_url") if "opensearch" in request.param else None
    index = make_store(request.param, tmp_path, url, collection=f"c-{uuid.uuid4().hex[:6]}")
    await index.open(MODELS)
    yield index
    await index.close()


async def _fill(store) -> None:
    """t1: d1 (2 chunks) and d2 (1) in default, d1 (1 chunk) in ``papers``; t2: d1 (1)."""
    await store.write_documents(
        ScopeKey("t1"),
        [
            write(
                "d1",
                [
                    encoded("d1", 0, "alpha particles decay", [1, 0, 0, 0], {1: 1.0}),
                    encoded("d1", 1, "beta decay", [0, 1, 0, 0], {2: 2.0}, section="Methods"),
                ],
            ),
            write("d2", [encoded("d2", 0, "gamma rays", [0.9, 0.1, 0, 0], {1: 0.2})]),
        ],
    )
    await store.create_collection(ScopeKey("t1", "papers"))
    await store.write_documents(
        ScopeKey("t1", "papers"),
        [
            write(
                "d1",
                [encoded("d1", 0, "alpha in papers", [1, 0, 0, 0], {1: 3.0}, collection="papers")],
            )
        ],
    )
    await store.write_documents(
        ScopeKey("t2"),
        [write("d1", [encoded("d1", 0, "alpha other tenant", [1, 0, 0, 0], {1: 5.0}, "t2")])],
    )


def _by_collection(report: dict) -> dict[tuple[str, str], dict]:
    return {(c["tenant_id"], c["collection"]): c for c in report["collections"]}


async def test_inspect_reports_every_store_and_collection(store):
    await _fill(store)
    report = await store.inspect()
    names = [b.name for b in store.backends]
    assert [s["store"] for s in report["stores"]] == names
    found = _by_collection(report)
    assert set(found) == {("t1", "default"), ("t1", "papers"), ("t2", "default")}
    assert found[("t1", "default")]["chunks"] == dict.fromkeys(names, 3)
    assert found[("t1", "default")]["documents"] == dict.fromkeys(names, 2)
    assert found[("t1", "papers")]["chunks"] == dict.fromkeys(names, 1)
    assert found[("t2", "default")]["documents"] == dict.fromkeys(names, 1)
    for entry in found.values():
        assert entry["models"]["dense_model"] == "m" and entry["models"]["dense_dim"] == 4
    for backend, described in zip(store.backends, report["stores"], strict=True):
        assert described["points"] == 5
        assert described["binding"]["dense_model"] == "m"
        assert described["binding"]["payload_schema"] == MODELS.payload_schema
        assert described["strategies"] == list(backend.strategies)
        sample = described["payload_fields"]
        assert {"tenant_id", "collection", "doc_id"} <= set(sample)
        if backend.name != "qdrant":  # local mode keeps no payload indexes
            indexed = {f.removesuffix(".keyword") for f in described["payload_indexes"]}
            assert set(PAYLOAD_INDEXES) <= indexed
        if backend.name in ("qdrant", "opensearch"):
            assert described["physical"] == f"{backend.connection.alias}-v1"
            assert described["versions"] == [described["physical"]]
        if backend.name in ("qdrant-edge", "opensearch"):
            assert described["disk_bytes"] > 0


async def test_inspect_narrows_to_a_tenant_and_a_collection(store):
    await _fill(store)
    assert set(_by_collection(await store.inspect(ScopeKey("t1", None)))) == {
        ("t1", "default"),
        ("t1", "papers"),
    }
    only = _by_collection(await store.inspect(ScopeKey("t1", "papers")))
    assert list(only) == [("t1", "papers")]
    await store.create_collection(ScopeKey("t2", "empty"))
    empty = _by_collection(await store.inspect(ScopeKey("t2", "empty")))[("t2", "empty")]
    assert set(empty["chunks"].values()) == {0}


async def test_collections_are_kept_apart_inside_a_tenant(store):
    await _fill(store)
    papers = ScopeKey("t1", "papers")
    assert [c["name"] for c in await store.list_collections(ScopeKey("t1"))] == [
        "default",
        "papers",
    ]
    assert [c["name"] for c in await store.list_collections(ScopeKey("t2"))] == ["default"]
    assert await store.has_collection(ScopeKey("t1", "papers")) and not await store.has_collection(
        ScopeKey("t2", "papers")
    )
    with pytest.raises(ConflictError):
        await store.create_collection(ScopeKey("t1", "papers"))
    in_papers = await store.search("dense", query(), 10, papers)
    assert [c.text for c in await store.fetch(papers, [h.chunk_id for h in in_papers])] == [
        "alpha in papers"
    ]
    in_default = await store.search("dense", query(), 10, ScopeKey("t1"))
    assert len(in_default) == 3 and not {h.chunk_id for h in in_papers} & {
        h.chunk_id for h in in_default
    }
    assert await store.fetch(ScopeKey("t1"), [h.chunk_id for h in in_papers]) == []
    assert (await store.count(papers), await store.count(ScopeKey("t1"))) == (1, 3)
    info = await store.document_info(papers, "d1")
    assert (info.tenant_id, info.collection, len(info.chunk_ids)) == ("t1", "papers", 1)
    assert await store.document_hashes(papers, ["d1", "d2"]) == {"d1": "h1"}


async def test_deleting_a_collection_leaves_no_chunk_of_it_in_any_store(store):
    await _fill(store)
    assert await store.delete_collection(ScopeKey("t1", "papers")) == 1
    for backend in store.backends:
        page, _ = await backend.scroll_payloads(None, ["tenant_id", "collection"], None, 100)
        assert [p["collection"] for _, p in page].count("papers") == 0
        assert len(page) == 4  # t1's default collection and t2 are untouched
    assert [c["name"] for c in await store.list_collections(ScopeKey("t1"))] == ["default"]
    assert not await store.has_collection(ScopeKey("t1", "papers"))
    with pytest.raises(NotFoundError):
        await store.delete_collection(ScopeKey("t1", "papers"))
    with pytest.raises(InvalidInputError, match="default collection"):
        await store.delete_collection(ScopeKey("t1", "default"))


async def test_a_failed_collection_delete_is_closed_and_finished_by_a_retry(store, monkeypatch):
    await _fill(store)
    last = store.backends[-1]

    async def down(_key: str) -> int:
        raise ServiceUnavailableError("injected: store down")

    monkeypatch.setattr(last, "delete_scope", down)
    with pytest.raises(ServiceUnavailableError):
        await store.delete_collection(ScopeKey("t1", "papers"))
    # Half deleted: no longer usable, still listed as being deleted.
    assert not await store.has_collection(ScopeKey("t1", "papers"))
    assert [c["state"] for c in await store.list_collections(ScopeKey("t1"))] == [
        "ready",
        "deleting",
    ]
    monkeypatch.undo()
    await store.delete_collection(ScopeKey("t1", "papers"))
    for backend in store.backends:
        assert await backend.count(ScopeKey("t1", "papers")) == 0
    assert [c["name"] for c in await store.list_collections(ScopeKey("t1"))] == ["default"]
