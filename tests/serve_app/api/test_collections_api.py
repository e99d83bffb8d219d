"""Named collections and the admin inspection over HTTP (in-process app, real small models),
on every topology: tenant A's collection is invisible to tenant B for reads, writes and
searches; a collection delete removes its chunks from every store; ``/v1/admin/inspect``
needs the ``admin`` scope."""

from __future__ import annotations

import uuid

import httpx
import pytest

from serve_app.api.app import create_app
from serve_app.api.auth import hash_api_key
from serve_app.pipelines.components import build_components
from serve_app.schemas import ScopeKey
from serve_app.service import RetrievalService

pytestmark = pytest.mark.asyncio(loop_scope="session")

KEYS = {
    "key-a": ("tenant-a", ["read", "write"]),
    "key-b": ("tenant-b", ["read", "write"]),
    "key-admin": ("ops", ["read", "admin"]),
}
PAPER = {
    "id": "plasmids",
    "title": "Plasmids",
    "text": "Plasmids carry antibiotic resistance genes between bacteria by conjugation.",
}
NOTE = {"id": "vectors", "title": "Vectors", "text": "Qdrant stores dense vectors for search."}


@pytest.fixture(scope="module", params=["embedded", "qdrant", "opensearch+qdrant"])
async def api(request, app_config_factory):
    tag = uuid.uuid4().hex[:8]
    stores: dict = {"topology": request.param}
    if request.param != "embedded":
        stores["qdrant"] = {"local_path": ":memory:", "collection": f"api-{tag}"}
    if request.param == "opensearch+qdrant":
        url = request.getfixturevalue("opensearch_url")
        stores["opensearch"] = {"hosts": [url], "index": f"api-{tag}", "number_of_replicas": 0}
    api_keys = [
        {"name": k, "sha256": hash_api_key(k), "tenant_id": t, "scopes": s}
        for k, (t, s) in KEYS.items()
    ]
    config = app_config_factory(stores=stores, api={"auth": {"api_keys": api_keys}})
    components = await build_components(config)
    transport = httpx.ASGITransport(app=create_app(RetrievalService(components)))
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=120) as http:
        yield http, components
    await components.close()


def key(name: str) -> dict:
    return {"X-API-Key": name}


async def test_a_collection_is_invisible_to_another_tenant(api):
    http, _ = api
    a, b = key("key-a"), key("key-b")
    created = await http.post("/v1/collections", json={"name": "papers"}, headers=a)
    assert created.status_code == 201 and created.json()["name"] == "papers"
    again = await http.post("/v1/collections", json={"name": "papers"}, headers=a)
    assert again.status_code == 409 and again.json()["error"]["code"] == "CONFLICT"
    put = await http.post(
        "/v1/collections/papers/documents", json={"documents": [PAPER]}, headers=a
    )
    assert put.status_code == 200 and put.json()["written"] == ["plasmids"]
    await http.post("/v1/documents", json={"documents": [NOTE]}, headers=a)

    names = [
        c["name"] for c in (await http.get("/v1/collections", headers=a)).json()["collections"]
    ]
    assert names == ["default", "papers"]
    listed_b = (await http.get("/v1/collections", headers=b)).json()["collections"]
    assert [c["name"] for c in listed_b] == ["default"]
    # Tenant B: not found for every read, write and search of A's collection.
    for method, path, body in [
        ("GET", "/v1/collections/papers", None),
        ("GET", "/v1/collections/papers/documents/plasmids", None),
        ("GET", "/v1/collections/papers/documents", None),
        ("POST", "/v1/collections/papers/search", {"query": "plasmids"}),
        ("POST", "/v1/search", {"query": "plasmids", "collection": "papers"}),
        ("POST", "/v1/collections/papers/documents", {"documents": [NOTE]}),
        ("DELETE", "/v1/collections/papers/documents/plasmids", None),
        ("DELETE", "/v1/collections/papers", None),
    ]:
        answer = await http.request(method, path, json=body, headers=b)
        assert answer.status_code == 404, (method, path, answer.text)
        assert answer.json()["error"]["code"] == "NOT_FOUND"
    # B's own collection of the same name is another corpus.
    assert (
        await http.post("/v1/collections", json={"name": "papers"}, headers=b)
    ).status_code == 201
    empty = await http.get("/v1/collections/papers/search", params={"q": "plasmids"}, headers=b)
    assert empty.status_code == 200 and empty.json()["results"] == []

    found = await http.post("/v1/collections/papers/search", json={"query": "plasmids"}, headers=a)
    assert [r["doc_id"] for r in found.json()["results"]] == ["plasmids"]
    same = await http.post(
        "/v1/search", json={"query": "plasmids", "collection": "papers"}, headers=a
    )
    assert [r["doc_id"] for r in same.json()["results"]] == ["plasmids"]
    # The default collection (the routes without a collection) does not see it.
    default = await http.post("/v1/search", json={"query": "plasmids"}, headers=a)
    assert [r["doc_id"] for r in default.json()["results"]] == ["vectors"]
    info = await http.get("/v1/collections/papers/documents/plasmids", headers=a)
    assert info.json()["collection"] == "papers" and info.json()["tenant_id"] == "tenant-a"
    assert (await http.get("/v1/documents/plasmids", headers=a)).status_code == 404
    detail = (await http.get("/v1/collections/papers", headers=a)).json()
    assert set(detail["documents"].values()) == {1} and detail["models"]["dense_dim"] == 384


async def test_a_collections_documents_are_listed_a_page_at_a_time(api):
    http, _ = api
    a = key("key-a")
    await http.post("/v1/collections", json={"name": "listed"}, headers=a)
    docs = [{**PAPER, "id": f"p{n}", "text": f"{PAPER['text']} {n}"} for n in range(5)]
    put = await http.post("/v1/collections/listed/documents", json={"documents": docs}, headers=a)
    assert put.status_code == 200, put.text
    seen, params = [], {"limit": 2}
    for _ in range(5):
        page = await http.get("/v1/collections/listed/documents", params=params, headers=a)
        assert page.status_code == 200, page.text
        seen += page.json()["documents"]
        if page.json()["next_cursor"] is None:
            break
        params = {"limit": 2, "cursor": page.json()["next_cursor"]}
    assert sorted(d["id"] for d in seen) == [f"p{n}" for n in range(5)]
    assert {d["title"] for d in seen} == {"Plasmids"} and all(d["chunk_count"] >= 1 for d in seen)
    default = (await http.get("/v1/documents", headers=a)).json()["documents"]
    assert not {d["id"] for d in default} & {f"p{n}" for n in range(5)}
    for bad in ({"limit": 0}, {"limit": 1001}, {"cursor": "p1"}, {"cursor": "../x"}):
        refused = await http.get("/v1/collections/listed/documents", params=bad, headers=a)
        assert refused.status_code == 422, (bad, refused.text)
        assert refused.json()["error"]["code"] == "INVALID_INPUT", refused.text
    await http.delete("/v1/collections/listed", headers=a)


async def test_deleting_a_collection_removes_its_chunks_everywhere(api):
    http, components = api
    a = key("key-a")
    await http.post("/v1/collections", json={"name": "trash"}, headers=a)
    await http.post("/v1/collections/trash/documents", json={"documents": [PAPER]}, headers=a)
    deleted = await http.delete("/v1/collections/trash", headers=a)
    assert deleted.status_code == 200 and deleted.json()["chunks_removed"] >= 1
    for backend in components.index.backends:
        page, _ = await backend.scroll_payloads(
            ScopeKey("tenant-a", "trash"), ["doc_id"], None, 100
        )
        assert page == []
    gone = await http.post("/v1/collections/trash/search", json={"query": "plasmids"}, headers=a)
    assert gone.status_code == 404
    assert (await http.delete("/v1/collections/default", headers=a)).status_code == 400


async def test_collection_names_are_checked(api):
    http, _ = api
    for name in ["Bad Name", "a/b", "x" * 65, ""]:
        answer = await http.post("/v1/collections", json={"name": name}, headers=key("key-a"))
        assert answer.status_code in (400, 422), name
    assert (await http.get("/v1/collections/UPPER", headers=key("key-a"))).status_code == 422


async def test_admin_inspect_needs_the_admin_scope(api):
    http, components = api
    await http.post("/v1/documents", json={"documents": [NOTE]}, headers=key("key-b"))
    refused = await http.get("/v1/admin/inspect", headers=key("key-a"))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "FORBIDDEN"
    assert (await http.get("/v1/admin/inspect")).status_code == 401
    report = (await http.get("/v1/admin/inspect", headers=key("key-admin"))).json()
    assert report["topology"] == components.config.stores.topology
    assert [s["store"] for s in report["stores"]] == [b.name for b in components.index.backends]
    keys = {(c["tenant_id"], c["collection"]) for c in report["collections"]}
    assert ("tenant-b", "default") in keys
    one = await http.get(
        "/v1/admin/inspect",
        params={"tenant": "tenant-b", "collection": "default"},
        headers=key("key-admin"),
    )
    (entry,) = one.json()["collections"]
    assert entry["tenant_id"] == "tenant-b" and set(entry["documents"].values()) == {1}


async def test_admin_inspect_of_a_collection_needs_its_tenant(api):
    """Before: the admin's own tenant was taken, so the report was of a tenant never named."""
    http, _ = api
    refused = await http.get(
        "/v1/admin/inspect", params={"collection": "default"}, headers=key("key-admin")
    )
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["code"] == "INVALID_INPUT" and "tenant" in error["message"]


async def test_an_upload_looks_its_collection_up_once(api, monkeypatch):
    """Before: the route checked the named collection, then the ingest checked it again."""
    http, components = api
    assert (
        await http.post("/v1/collections", json={"name": "once"}, headers=key("key-a"))
    ).is_success
    has_collection = components.index.has_collection
    lookups: list[tuple] = []

    async def counted(*args):
        lookups.append(args)
        return await has_collection(*args)

    monkeypatch.setattr(components.index, "has_collection", counted)
    response = await http.post(
        "/v1/collections/once/documents", json={"documents": [PAPER]}, headers=key("key-a")
    )
    assert response.status_code == 200, response.text
    assert lookups == [(ScopeKey("tenant-a", "once"),)]
