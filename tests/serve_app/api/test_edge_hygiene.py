"""Input hygiene at the edge (in-process app, real small models): headers that are not text,
request ids that could forge log fields, non-finite numbers, ids with control or bidi
characters, uploads whose chunks would cost the encoders far more than their size says,
HTML nested past the parser's depth, and the offline ``/docs`` page."""

from __future__ import annotations

import json

import httpx
import pytest

from serve_app.api.app import create_app
from serve_app.pipelines.components import build_components
from serve_app.service import RetrievalService
from tests.support.access_log import captured_access_lines

pytestmark = pytest.mark.asyncio(loop_scope="session")

PER_DOCUMENT = 12  # limits.max_chunks_per_document here
PER_REQUEST = 20  # limits.max_chunks_per_request here


@pytest.fixture(scope="module")
async def client(app_config_factory):
    config = app_config_factory(
        limits={"max_chunks_per_document": PER_DOCUMENT, "max_chunks_per_request": PER_REQUEST},
        api={"ingest_batch_size": 1},  # one document a sub-batch: the request cap spans them
        chunker={"max_tokens": 256, "overlap_tokens": 32},  # the chunk counts below assume it
    )
    components = await build_components(config)
    transport = httpx.ASGITransport(app=create_app(RetrievalService(components)))
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=120) as http:
        yield http
    await components.close()


def error_of(response: httpx.Response) -> dict:
    assert response.headers["content-type"].startswith("application/json"), response.text
    return response.json()["error"]


@pytest.mark.parametrize("path", ["/healthz", "/v1/search?q=x", "/v1/documents/x"])
async def test_a_header_that_is_not_utf8_is_a_400_in_the_envelope(client, path):
    response = await client.get(path, headers=[(b"X-Request-ID", b"\xff\xfe\x80id")])
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "INVALID_HEADER" and "x-request-id" in error["message"].lower()
    assert response.headers["x-request-id"] == error["request_id"]  # a fresh, safe id
    assert len(error["request_id"]) == 32 and error["request_id"].isalnum()


@pytest.mark.parametrize(
    "sent",
    ['a"b', "x" * 129, 'id", "level": "CRITICAL', "caf\u00e9", "a b", "<script>"],
)
async def test_an_unsafe_request_id_is_replaced_and_the_new_one_echoed(client, sent):
    response = await client.get("/healthz", headers=[(b"X-Request-ID", sent.encode())])
    assert response.status_code == 200
    echoed = response.headers["x-request-id"]
    assert echoed != sent and len(echoed) == 32 and echoed.isalnum()


async def test_a_safe_request_id_is_kept(client):
    response = await client.get("/healthz", headers={"X-Request-ID": "client-42.a:b_c"})
    assert response.headers["x-request-id"] == "client-42.a:b_c"


async def test_every_access_log_line_is_json_with_its_own_fields(client):
    with captured_access_lines() as access:
        await client.get('/healthz?x=", "status": 999', headers={"X-Request-ID": 'a", "b'})
    lines = access.text().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["status"] == 200 and entry["path"] == "/healthz"
    assert entry["request_id"] != 'a", "b'


async def test_the_logged_path_is_the_one_the_client_sent():
    # Decoded, "%2F" and "%0A" made the line name another path (and a line break).
    with captured_access_lines() as access:
        await client_get_raw("/v1/documents/..%2Fadmin%0Ainspect")
    (entry,) = access.entries()
    assert entry["path"] == "/v1/documents/..%2Fadmin%0Ainspect"


async def client_get_raw(raw_path: str) -> None:
    from serve_app.api.edge import Edge

    async def app(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        pass

    from urllib.parse import unquote

    scope = {
        "type": "http", "method": "GET", "path": unquote(raw_path),
        "raw_path": raw_path.encode(), "headers": [],
    }  # fmt: skip
    await Edge(app)(scope, receive, send)


@pytest.mark.parametrize("weight", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_non_finite_fusion_weights_are_a_422(client, weight):
    body = (
        '{"query": "plasmids", "fusion": {"method": "weighted", '
        f'"weights": {{"bm25": {weight}, "dense": 1}}}}}}'
    )
    response = await client.post(
        "/v1/search", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "INVALID_INPUT" and "finite" in error["message"]


@pytest.mark.parametrize("doc_id", ["nul\x00id", "esc\x1b[31m", "rtl\u202egnp.exe", "zw\u200bj"])
async def test_document_ids_with_control_or_format_characters_are_refused(client, doc_id):
    body = {"documents": [{"id": doc_id, "text": "Plasmids spread resistance."}]}
    response = await client.post("/v1/documents", json=body)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "INVALID_INPUT" and "printable" in error["message"]


def quotes(lines: int) -> str:
    """Markdown of ever deeper nested block quotes: the loader keeps each line's text (the
    markers go), so 27 KB make 15 chunks of 256 tokens."""
    return "\n".join(
        ">" * (i % 60 + 1) + f" line {i} about plasmids and bacteria" for i in range(lines)
    )


async def test_a_document_over_the_chunk_limit_is_a_413_with_its_counts(client):
    files = {"files": ("quotes.md", quotes(400).encode(), "text/markdown")}
    response = await client.post("/v1/documents", files=files)
    assert response.status_code == 413, response.text
    error = error_of(response)
    assert error["code"] == "PAYLOAD_TOO_LARGE"
    details = error["details"]
    assert details["limit"] == PER_DOCUMENT and details["chunks"] > PER_DOCUMENT
    assert "limits.max_chunks_per_document" in error["message"]
    missing = await client.get("/v1/documents/quotes")
    assert missing.status_code == 404  # nothing of it was encoded or written


async def test_a_request_over_the_chunk_limit_is_a_413_naming_what_was_written(client):
    prose = " ".join(f"word{i} plasmid resistance" for i in range(250))  # about 8 chunks
    documents = [{"id": f"part-{i}", "text": f"{i} {prose}"} for i in range(4)]
    response = await client.post("/v1/documents", json={"documents": documents})
    assert response.status_code == 413, response.text
    error = error_of(response)
    assert error["details"]["limit"] == PER_REQUEST
    assert "limits.max_chunks_per_request" in error["message"]
    written = error["details"]["written"]
    assert len(written) < len(documents)
    for document in documents:
        found = await client.get(f"/v1/documents/{document['id']}")
        assert (found.status_code == 200) == (document["id"] in written)


async def test_html_nested_past_the_parser_depth_is_refused_not_dropped(client):
    depth = 50_000
    page = "<html><body>" + "<div>" * depth + "the text" + "</div>" * depth + "</body></html>"
    files = {"files": ("deep.html", page.encode(), "text/html")}
    response = await client.post("/v1/documents", files=files)
    assert response.status_code == 400
    message = error_of(response)["message"]
    assert "deep.html" in message and "nest" in message and "has no text" not in message


async def test_docs_work_offline(client):
    page = await client.get("/docs")
    assert page.status_code == 200 and "cdn" not in page.text.lower()
    assert "/docs/assets/swagger-ui-bundle.js" in page.text
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        served = await client.get(f"/docs/assets/{asset}")
        assert served.status_code == 200 and len(served.content) > 10_000
    assert (await client.get("/openapi.json")).status_code == 200
