"""The edge in process (real small models): a body that stalls or trickles below the floor
rate is a 408 with ``Connection: close``, an upload at a fair pace is not; every request
writes one JSON access line with principal, tenant, route, status, code and request id (the
secret never); refusals are WARNING lines without a traceback."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from serve_app.api.app import create_app
from serve_app.api.auth import hash_api_key
from serve_app.pipelines.components import build_components
from serve_app.service import RetrievalService
from tests.support.access_log import captured_access_lines

pytestmark = pytest.mark.asyncio(loop_scope="session")

IDLE_S, RATE, GRACE_S = 0.6, 2_000, 0.5  # api.connections here: small, so the test is quick
WRITER, READER = "writer-secret-1", "reader-secret-2"


@pytest.fixture(scope="module")
async def app(app_config_factory):
    config = app_config_factory(
        api={
            "auth": {
                "mode": "required",
                "api_keys": [
                    {"name": "w", "sha256": hash_api_key(WRITER), "tenant_id": "tenant-a"},
                    {
                        "name": "r",
                        "sha256": hash_api_key(READER),
                        "tenant_id": "tenant-b",
                        "scopes": ["read"],
                    },
                ],
            },
            "connections": {
                "body_idle_timeout_s": IDLE_S,
                "body_min_rate_bytes_per_s": RATE,
                "body_rate_grace_s": GRACE_S,
            },
        }
    )
    components = await build_components(config)
    application = create_app(RetrievalService(components))
    yield application
    await application.state.loaders.close()
    await components.close()


class Trickle:
    """One request at the ASGI level whose body arrives ``chunk`` bytes every ``every_s``."""

    def __init__(self, chunk: bytes, every_s: float, total: int) -> None:
        self.chunk, self.every_s, self.left = chunk, every_s, total
        self.started: dict = {}
        self.body = b""

    async def receive(self) -> dict:
        if self.left <= 0:
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(self.every_s)
        self.left -= len(self.chunk)
        return {"type": "http.request", "body": self.chunk, "more_body": self.left > 0}

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.started = message
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")

    async def post(self, app, path: str, key: str) -> float:
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
            "root_path": "", "query_string": b"", "client": ("127.0.0.1", 1),
            "server": ("t", 80), "state": {},
            "headers": [(b"content-type", b"application/json"), (b"x-api-key", key.encode())],
        }  # fmt: skip
        began = time.monotonic()
        await asyncio.wait_for(app(scope, self.receive, self.send), 20)
        return time.monotonic() - began


async def test_a_stalled_body_is_408_and_closed_within_the_idle_timeout(app):
    wire = Trickle(b"{", every_s=30, total=10)  # one byte, then nothing for 30 s
    took = await wire.post(app, "/v1/search", WRITER)
    assert wire.started["status"] == 408, wire.body
    assert json.loads(wire.body)["error"]["code"] == "REQUEST_TIMEOUT"
    assert (b"connection", b"close") in wire.started["headers"]
    assert took < IDLE_S + 2


async def test_a_body_below_the_floor_rate_is_408_after_the_grace_period(app):
    # 100 bytes every 0.2 s is 500 bytes/s: each chunk comes within the idle timeout, but the
    # body falls behind 2,000 bytes/s once the grace period is over.
    wire = Trickle(b" " * 100, every_s=0.2, total=1_000_000)
    took = await wire.post(app, "/v1/search", WRITER)
    assert wire.started["status"] == 408, wire.body
    assert "bytes/s" in json.loads(wire.body)["error"]["message"]
    assert GRACE_S < took < GRACE_S + 2


async def test_a_body_at_a_fair_pace_is_answered_normally(app):
    body = json.dumps({"query": "bacteria", "top_k": 2}).encode()
    wire = Trickle(body, every_s=0.3, total=len(body))  # all of it in 0.3 s
    await wire.post(app, "/v1/search", WRITER)
    assert wire.started["status"] == 200, wire.body


async def test_one_access_line_per_request_with_who_and_never_the_secret(app):
    sent = {
        "ok": ("GET", "/v1/search?q=x", {"X-API-Key": WRITER}),
        "bad-key": ("GET", "/v1/search?q=x", {"X-API-Key": "not-a-key"}),
        "no-key": ("GET", "/v1/documents/x", {}),
        "read-only": ("DELETE", "/v1/documents/x", {"X-API-Key": READER}),
    }
    with captured_access_lines() as access:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for request_id, (method, path, headers) in sent.items():
                await client.request(method, path, headers={**headers, "X-Request-ID": request_id})
    text = access.text()
    assert WRITER not in text and READER not in text and "not-a-key" not in text
    lines = {line["request_id"]: line for line in map(json.loads, text.splitlines())}
    assert set(lines) == set(sent)
    expected = {
        "ok": ("INFO", 200, None, "key:w", "tenant-a", "/v1/search"),
        "bad-key": ("WARNING", 401, "UNAUTHENTICATED", None, None, "unmatched"),
        "no-key": ("WARNING", 401, "UNAUTHENTICATED", None, None, "unmatched"),
        "read-only": ("WARNING", 403, "FORBIDDEN", "key:r", "tenant-b", "/v1/documents/{doc_id:path}"),
    }
    for request_id, (level, status, code, principal, tenant, route) in expected.items():
        line = lines[request_id]
        assert line["level"] == level and line["status"] == status, line
        assert (line["code"], line["principal"], line["tenant"]) == (code, principal, tenant)
        assert line["route"] == route and line["logger"] == "serve_app.access", line
        assert "exception" not in line
