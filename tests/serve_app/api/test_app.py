"""The HTTP API over the in-process pipelines (httpx ASGI transport; no Ray here)."""

import time

import httpx
import jwt
import pytest

from serve_app.api.app import create_app
from serve_app.api.auth import hash_api_key
from serve_app.pipelines.components import build_components
from serve_app.service import RetrievalService

HS_SECRET = "test-secret-of-sufficient-length-0123456789"
KEYS = {"key-a": "tenant-a", "key-b": "tenant-b"}


@pytest.fixture(scope="module")
async def client(app_config_factory):
    api_keys = [{"name": t, "sha256": hash_api_key(k), "tenant_id": t} for k, t in KEYS.items()]
    api_keys.append(
        {
            "name": "reader",
            "sha256": hash_api_key("key-read"),
            "tenant_id": "tenant-a",
            "scopes": ["read"],
        }
    )
    config = app_config_factory(
        api={
            "auth": {
                "mode": "required",
                "api_keys": api_keys,
                "jwt": {"enabled": True, "algorithms": ["HS256"], "secret": HS_SECRET},
            },
            "max_request_bytes": 200_000,
        }
    )
    components = await build_components(config)
    app = create_app(RetrievalService(components))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as http:
        yield http
    await components.close()


def auth(key: str = "key-a") -> dict:
    return {"X-API-Key": key}


DOCS = {
    "documents": [
        {
            "id": "qdrant",
            "title": "Qdrant",
            "text": "Qdrant stores dense vectors and filters on payloads.",
        },
        {
            "id": "bm25",
            "title": "BM25",
            "text": "BM25 ranks documents by term frequency and inverse document frequency.",
        },
        {
            "id": "paper-1",
            "title": "A study",
            "sections": [
                {
                    "title": "Methods",
                    "text": "We sequenced the genomes of forty bacterial strains.",
                },
                {"title": "Results", "text": "Antibiotic resistance genes were found on plasmids."},
            ],
            "metadata": {"year": 2020},
        },
    ]
}


async def test_ingest_search_get_delete_cycle(client):
    response = await client.post("/v1/documents", json=DOCS, headers=auth())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["documents"] == 3 and sorted(body["written"]) == ["bm25", "paper-1", "qdrant"]

    again = await client.post("/v1/documents", json=DOCS, headers=auth())
    assert again.json()["written"] == [] and len(again.json()["unchanged"]) == 3

    search = await client.post(
        "/v1/search", json={"query": "where are antibiotic resistance genes?"}, headers=auth()
    )
    assert search.status_code == 200
    top = search.json()["results"][0]
    assert top["doc_id"] == "paper-1" and top["section"] == "Results"
    for field in ("chunk_id", "text", "score", "scores", "section", "metadata"):
        assert field in top
    assert top["metadata"]["year"] == 2020

    get = await client.get(
        "/v1/search",
        params={"q": "dense vectors", "top_k": 1, "strategies": "dense"},
        headers=auth(),
    )
    assert get.json()["results"][0]["doc_id"] == "qdrant" and get.json()["strategies"] == ["dense"]

    info = await client.get("/v1/documents/paper-1", headers=auth())
    assert info.status_code == 200 and len(info.json()["chunk_ids"]) == 2

    deleted = await client.delete("/v1/documents/paper-1", headers=auth())
    assert deleted.json() == {"deleted": "paper-1", "chunks_removed": 2}
    after = await client.post(
        "/v1/search", json={"query": "antibiotic resistance plasmids"}, headers=auth()
    )
    assert "paper-1" not in {r["doc_id"] for r in after.json()["results"]}


async def test_tenant_isolation(client):
    await client.post(
        "/v1/documents",
        json={"documents": [{"id": "secret", "text": "Tenant B's private notes on zebrafish."}]},
        headers=auth("key-b"),
    )
    found_b = await client.post("/v1/search", json={"query": "zebrafish"}, headers=auth("key-b"))
    assert "secret" in {r["doc_id"] for r in found_b.json()["results"]}
    found_a = await client.post("/v1/search", json={"query": "zebrafish"}, headers=auth("key-a"))
    assert "secret" not in {r["doc_id"] for r in found_a.json()["results"]}
    assert (await client.get("/v1/documents/secret", headers=auth("key-a"))).status_code == 404
    assert (await client.delete("/v1/documents/secret", headers=auth("key-a"))).status_code == 404
    assert (await client.get("/v1/documents/secret", headers=auth("key-b"))).status_code == 200


async def test_tenant_cannot_be_set_in_the_body(client):
    body = {"documents": [{"id": "x", "text": "t", "tenant_id": "tenant-b"}]}
    response = await client.post("/v1/documents", json=body, headers=auth())
    assert response.status_code == 400 and "tenant_id" in response.json()["error"]["message"]


async def test_jwt_bearer_tokens(client):
    token = jwt.encode(
        {"tenant": "tenant-b", "sub": "svc", "exp": time.time() + 60}, HS_SECRET, algorithm="HS256"
    )
    response = await client.post(
        "/v1/search", json={"query": "zebrafish"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200
    expired = jwt.encode(
        {"tenant": "tenant-b", "exp": time.time() - 10}, HS_SECRET, algorithm="HS256"
    )
    response = await client.post(
        "/v1/search", json={"query": "x"}, headers={"Authorization": f"Bearer {expired}"}
    )
    assert response.status_code == 401 and "expired" in response.json()["error"]["message"]
    forged = jwt.encode(
        {"tenant": "tenant-b", "exp": time.time() + 60},
        "wrong-secret-wrong-secret-wrong-secret",
        algorithm="HS256",
    )
    response = await client.post(
        "/v1/search", json={"query": "x"}, headers={"Authorization": f"Bearer {forged}"}
    )
    assert response.status_code == 401


@pytest.mark.parametrize(
    "method,path,kwargs,status,code",
    [
        ("post", "/v1/search", {"json": {"query": ""}}, 422, "INVALID_INPUT"),
        (
            "post",
            "/v1/search",
            {"json": {"query": "x", "strategies": ["colbert"]}},
            422,
            "INVALID_INPUT",
        ),
        ("post", "/v1/search", {"json": {"query": "x", "rerank": True}}, 400, "INVALID_INPUT"),
        (
            "post",
            "/v1/search",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            422,
            "INVALID_INPUT",
        ),
        ("get", "/v1/search", {"params": {"q": "x", "fusion": "borda"}}, 422, "INVALID_INPUT"),
        ("post", "/v1/documents", {"json": {"documents": []}}, 400, "INVALID_INPUT"),
        (
            "post",
            "/v1/documents",
            {"files": {"files": ("a.docx", b"PK\x03\x04", "application/octet-stream")}},
            400,
            "INVALID_INPUT",
        ),
        (
            "post",
            "/v1/documents",
            {"files": {"files": ("bad.xml", b'<?xml version="1.0"?><article><front>', "text/xml")}},
            400,
            "INVALID_INPUT",
        ),
        (
            "post",
            "/v1/documents",
            {"json": {"documents": [{"id": "big", "text": "x" * 300_000}]}},
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        ("get", "/v1/documents/never-ingested", {}, 404, "NOT_FOUND"),
        ("get", "/v1/nothing-here", {}, 404, "NOT_FOUND"),
    ],
)
async def test_error_envelope(client, method, path, kwargs, status, code):
    headers = {**auth(), **kwargs.pop("headers", {})}
    response = await getattr(client, method)(path, headers=headers, **kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (
        error["code"] == code
        and error["message"]
        and error["request_id"] == response.headers["x-request-id"]
    )
    assert "Traceback" not in response.text


async def test_auth_errors(client):
    missing = await client.post("/v1/search", json={"query": "x"})
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "UNAUTHENTICATED"
    wrong = await client.post("/v1/search", json={"query": "x"}, headers=auth("nope"))
    assert wrong.status_code == 401
    read_only = await client.post("/v1/documents", json=DOCS, headers=auth("key-read"))
    assert read_only.status_code == 403 and read_only.json()["error"]["code"] == "FORBIDDEN"
    assert (
        await client.post("/v1/search", json={"query": "x"}, headers=auth("key-read"))
    ).status_code == 200


async def test_timeout(client):
    response = await client.post(
        "/v1/search", json={"query": "slow"}, headers={**auth(), "X-Request-Timeout-Ms": "1"}
    )
    assert response.status_code == 504 and response.json()["error"]["code"] == "TIMEOUT"


async def test_request_id_is_echoed_or_generated(client):
    echoed = await client.get("/healthz", headers={"X-Request-ID": "abc-123"})
    assert echoed.headers["x-request-id"] == "abc-123"
    generated = await client.get("/healthz", headers={"X-Request-ID": "bad id with spaces"})
    assert len(generated.headers["x-request-id"]) == 32


async def test_health_ready_metrics_openapi(client):
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"store": "ok"}
    await client.post("/v1/search", json={"query": "metrics"}, headers=auth())
    metrics = (await client.get("/metrics")).text
    assert (
        'serve_app_stage_latency_seconds_bucket{le="0.005",operation="search",stage="encode.dense"}'
        in metrics
    )
    assert 'serve_app_requests_total{endpoint="/v1/search",method="POST",status="200"}' in metrics
    assert 'serve_app_errors_total{code="UNAUTHENTICATED"}' in metrics
    spec = (await client.get("/openapi.json")).json()
    assert {"/v1/documents", "/v1/search", "/readyz"} <= set(spec["paths"])
    # The answer's events, published: each item of the SSE stream is an event name, an id
    # and a data string holding the AnswerEvent body of that name.
    answer = spec["paths"]["/v1/answer"]["post"]["responses"]["200"]["content"]
    item_ref = answer["text/event-stream"]["schema"]["$ref"]
    assert item_ref == "#/components/schemas/AnswerStreamEvent"
    events = spec["components"]["schemas"]["AnswerEvent"]["discriminator"]["mapping"]
    assert set(events) == {"metadata", "delta", "done", "error"}
    assert all(
        ref.removeprefix("#/components/schemas/") in spec["components"]["schemas"]
        for ref in events.values()
    )
    items = spec["components"]["schemas"]["AnswerStreamEvent"]["oneOf"]
    assert {
        i["properties"]["event"]["const"]: i["properties"]["data"]["contentSchema"]["$ref"]
        for i in items
    } == events


async def test_ingest_has_its_own_deadline(app_config_factory):
    """Uploads encode every chunk inside the request: they get api.ingest_timeout_s, while
    searches keep the short api.request_timeout_s."""
    config = app_config_factory(api={"request_timeout_s": 0.001, "ingest_timeout_s": 120})
    components = await build_components(config)
    try:
        transport = httpx.ASGITransport(app=create_app(RetrievalService(components)))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", timeout=60
        ) as http:
            ingest = await http.post("/v1/documents", json={"documents": DOCS["documents"][:2]})
            assert ingest.status_code == 200, ingest.text
            search = await http.post("/v1/search", json={"query": "dense vectors"})
            assert search.status_code == 504 and search.json()["error"]["code"] == "TIMEOUT"
    finally:
        await components.close()
