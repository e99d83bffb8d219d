"""The headers Ray Serve obeys from a client do not get past the edge, judged by Ray's own
parsers: a client could send ``x-request-timeout-seconds: 0`` (Serve's request timeout off),
``x-request-disconnect-disabled: ?1`` (work goes on after the client left), a multiplexed
model id or a session id (routing), and Serve honoured them."""

from __future__ import annotations

import asyncio

import pytest
from ray.serve._private import constants
from ray.serve._private.http_util import (
    parse_disconnect_disabled_header,
    parse_request_timeout_header,
    parse_session_id_header,
)

from serve_app.api.edge import SERVE_CONTROL_HEADERS, Edge

SENT = [
    (b"x-request-timeout-seconds", b"0"),
    (b"X-Request-Disconnect-Disabled", b"?1"),
    (b"serve_multiplexed_model_id", b"other-model"),
    (b"serve-multiplexed-model-id", b"other-model"),
    (b"x-session-id", b"pinned"),
    (b"x_session_id", b"pinned"),
    (b"accept", b"application/json"),
]


def headers_past_the_edge(sent: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    seen: dict[bytes, bytes] = {}

    async def app(scope, receive, send) -> None:
        seen.update({k.lower(): v for k, v in scope["headers"]})
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        pass

    scope = {"type": "http", "method": "GET", "path": "/healthz", "headers": list(sent)}
    asyncio.run(Edge(app, log_passed=False)(scope, receive, send))
    return seen


def test_serve_would_obey_them_without_the_edge():
    raw = {k.lower(): v for k, v in SENT}
    assert parse_request_timeout_header(raw, 30.0) is None  # the timeout switched off
    assert parse_disconnect_disabled_header(raw)
    assert parse_session_id_header(raw) == "pinned"


def test_none_gets_past_the_edge_by_rays_own_parsers():
    seen = headers_past_the_edge(SENT)
    assert parse_request_timeout_header(seen, 30.0) == 30.0
    assert not parse_disconnect_disabled_header(seen)
    assert parse_session_id_header(seen) == ""
    multiplexed = constants.SERVE_MULTIPLEXED_MODEL_ID
    assert not [k for k in seen if k.decode().replace("-", "_") == multiplexed]
    assert seen[b"accept"] == b"application/json"  # every other header passes


@pytest.mark.parametrize(
    "name",
    [
        constants.SERVE_HTTP_REQUEST_TIMEOUT_S_HEADER,
        constants.SERVE_HTTP_REQUEST_DISCONNECT_DISABLED_HEADER,
        constants.SERVE_MULTIPLEXED_MODEL_ID,
        constants.SERVE_SESSION_ID,
    ],
)
def test_the_edges_list_names_every_header_ray_reads(name):
    assert name.lower().replace("_", "-") in SERVE_CONTROL_HEADERS
