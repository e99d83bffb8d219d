"""The HTTP API over the opensearch+qdrant topology (osmem-server + qdrant-client local mode)
with the real small models: ingest, search, delete, and the API's answer when OpenSearch fails
mid-ingest (503, nothing half-visible, a retry converges) or when the request's own deadline
cuts an update (504, one version served whole)."""

from __future__ import annotations

import uuid

import httpx
import pytest
from opensearchpy import AsyncOpenSearch
from store_helpers import FlakyConnection

from serve_app.api.app import create_app
from serve_app.pipelines.components import build_components
from serve_app.schemas import ScopeKey
from serve_app.service import RetrievalService

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="session")]

PARAGRAPH = (
    "Plasmids carry antibiotic resistance genes between bacteria by conjugation. "
    "Horizontal gene transfer spreads resistance across species in hospitals. "
)
DOCS = [
    {"id": f"doc-{i}", "title": f"Resistance study {i}", "text": PARAGRAPH * 40 + f"marker{i}"}
    for i in range(3)
]


@pytest.fixture(scope="module")
async def api(app_config_factory, opensearch_url):
    config = app_config_factory(
        stores={
            "topology": "opensearch+qdrant",
            "opensearch": {
                "hosts": [opensearch_url],
                "index": f"api-{uuid.uuid4().hex[:8]}",
                "number_of_replicas": 0,
                "bulk_batch_size": 4,
                "max_retries": 0,
            },
            "qdrant": {"local_path": ":memory:", "collection": "api"},
        },
        api={"ingest_batch_size": 8},
    )
    components = await build_components(config)
    text_store, _ = components.index.backends
    await text_store.connection.client.close()
    text_store.connection._client = AsyncOpenSearch(
        hosts=[opensearch_url], connection_class=FlakyConnection, max_retries=0
    )
    transport = httpx.ASGITransport(app=create_app(RetrievalService(components)))
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=120) as http:
        yield http, components
    FlakyConnection.bulk_budget, FlakyConnection.down = None, False
    await components.close()


async def found_docs(http: httpx.AsyncClient, query: str) -> set[str]:
    response = await http.post("/v1/search", json={"query": query, "top_k": 20})
    assert response.status_code == 200, response.text
    return {r["doc_id"] for r in response.json()["results"]}


async def test_opensearch_failure_mid_ingest_is_reported_and_retry_converges(api):
    http, components = api
    assert (await http.get("/readyz")).status_code == 200
    FlakyConnection.bulk_budget = 1
    failed = await http.post("/v1/documents", json={"documents": DOCS})
    FlakyConnection.bulk_budget = None
    assert failed.status_code == 503, failed.text
    error = failed.json()["error"]
    assert error["code"] == "SERVICE_UNAVAILABLE"
    assert "keep their previous version" in error["message"]
    assert await found_docs(http, "antibiotic resistance plasmids") == set()
    assert await components.index.backends[1].count(ScopeKey("default")) == 0

    retried = await http.post("/v1/documents", json={"documents": DOCS})
    assert retried.status_code == 200, retried.text
    chunks = retried.json()["chunks_written"]
    assert chunks > 3
    again = await http.post("/v1/documents", json={"documents": DOCS})
    assert sorted(again.json()["unchanged"]) == sorted(d["id"] for d in DOCS)
    assert await components.index.count(ScopeKey("default")) == chunks
    assert await components.index.backends[1].count(ScopeKey("default")) == chunks

    assert await found_docs(http, "antibiotic resistance plasmids") == {d["id"] for d in DOCS}
    for strategy in ("bm25", "splade", "dense"):
        response = await http.post(
            "/v1/search", json={"query": "marker1 resistance", "strategies": [strategy]}
        )
        assert response.status_code == 200 and response.json()["results"], strategy

    assert (await http.delete("/v1/documents/doc-0")).status_code == 200
    assert "doc-0" not in await found_docs(http, "antibiotic resistance plasmids")
    assert await components.index.backends[1].count(ScopeKey("default")) < chunks


async def served_chunks(http, doc_id: str) -> set[str]:
    response = await http.post(
        "/v1/search",
        json={
            "query": "resistance plasmids version",
            "top_k": 200,
            "filters": {"doc_ids": [doc_id]},
        },
    )
    assert response.status_code == 200, response.text
    return {r["chunk_id"] for r in response.json()["results"]}


async def test_an_update_cut_by_its_deadline_serves_one_version_whole(api):
    """X-Request-Timeout-Ms cuts the upload wherever it is (chunking, encoding, either store's
    write): the answer is 504 and the document is served as before or as after, never a mix;
    writing it again converges."""
    http, components = api
    one = {"id": "cut", "title": "Cut study", "text": PARAGRAPH * 30 + "version one"}
    two = {**one, "text": PARAGRAPH * 30 + "version two"}

    async def put(doc: dict, deadline_ms: int | None = None) -> httpx.Response:
        headers = {"X-Request-Timeout-Ms": str(deadline_ms)} if deadline_ms else {}
        return await http.post("/v1/documents", json={"documents": [doc]}, headers=headers)

    assert (await put(two)).status_code == 200
    v2 = await served_chunks(http, "cut")
    timed = await put(one)
    assert timed.status_code == 200
    v1 = await served_chunks(http, "cut")
    assert v1 and v2 and not v1 & v2  # the content hash is in the chunk ids
    total_ms = timed.json()["timings_ms"]["total"]

    outcomes = []
    for fraction in (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 1.0, 1.1, 1.5):
        deadline = max(1, int(total_ms * fraction))
        response = await put(two, deadline)
        assert response.status_code in (200, 504), response.text
        now = await served_chunks(http, "cut")
        assert now in (v1, v2), f"deadline {deadline} ms: a mix of versions is served"
        outcomes.append((deadline, response.status_code, "v2" if now == v2 else "v1"))
        assert (await put(one)).status_code == 200  # the retry (back to v1) converges
        assert await served_chunks(http, "cut") == v1
        assert set((await http.get("/v1/documents/cut")).json()["chunk_ids"]) == v1
    assert any(status == 504 for _, status, _ in outcomes), outcomes
    total = await components.index.count(ScopeKey("default"))
    assert total == await components.index.backends[1].count(ScopeKey("default"))  # no leftovers


async def test_a_stores_own_words_stay_in_the_server_log(api, caplog):
    """(was: the 503 told the client OpenSearch's own error, its internal host name and port
    included) The client is told what failed; the store's words go to the log, with the
    request id."""
    http, components = api
    text_store, _ = components.index.backends
    held = text_store.connection._client
    hidden = f"opensearch-{uuid.uuid4().hex[:8]}.internal.invalid"
    text_store.connection._client = AsyncOpenSearch(hosts=[f"http://{hidden}:9211"], max_retries=0)
    try:
        with caplog.at_level("WARNING", logger="serve_app"):
            response = await http.post("/v1/documents", json={"documents": DOCS[:1]})
    finally:
        await text_store.connection._client.close()
        text_store.connection._client = held
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert hidden not in response.text and "9211" not in response.text, error
    assert "OpenSearch unreachable during" in error["message"], error
    assert hidden in caplog.text and error["request_id"] in caplog.text
