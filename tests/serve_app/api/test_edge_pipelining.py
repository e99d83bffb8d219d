"""Two requests on one connection, over a raw socket, against a real uvicorn (both of its HTTP
parsers, on uvloop and on the stdlib loop): the edge acts on every request, not only the
first. uvicorn starts a pipelined request from inside the previous request's ``send()``, so
an edge that recognised "already inside an edge" by an ambient context variable passed the
second request through unchecked, unlogged and with its raw request id."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request

from serve_app.api.edge import Edge
from serve_app.config import ApiConfig
from serve_app.ports import free_port
from tests.support.access_log import captured_access_lines

LIMIT = 1_000_000
SERVERS = [
    ("uvloop", "httptools"),
    ("uvloop", "h11"),
    ("asyncio", "httptools"),
    ("asyncio", "h11"),
]


def echo_app() -> FastAPI:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> dict:
        body = await request.body()
        return {"bytes": len(body), "id": request.headers.get("x-request-id")}

    return app


@contextmanager
def serving(loop: str, http: str) -> Iterator[int]:
    """The edge around a small app, served by uvicorn in its own thread and loop."""
    port = free_port()
    config = uvicorn.Config(
        Edge(echo_app(), api=ApiConfig(max_json_bytes=LIMIT)),
        host="127.0.0.1",
        port=port,
        loop=loop,
        http=http,
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)


def post(body: bytes, *headers: bytes) -> bytes:
    extra = b"".join(h + b"\r\n" for h in headers)
    return (
        b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\n"
        + extra
        + b"Content-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def answers(port: int, data: bytes, count: int) -> list[tuple[int, dict, bytes]]:
    """Sends ``data`` at once on one connection; the first ``count`` answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        buffer = b""
        parsed: list[tuple[int, dict, bytes]] = []
        while len(parsed) < count:
            while b"\r\n\r\n" not in buffer:
                chunk = sock.recv(65536)
                assert chunk, f"closed after {len(parsed)} answers"
                buffer += chunk
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            headers = {
                k.strip().lower().decode(): v.strip().decode("latin-1")
                for k, _, v in (line.partition(b":") for line in lines[1:])
            }
            length = int(headers.get("content-length", "0"))
            while len(buffer) < length:
                chunk = sock.recv(65536)
                assert chunk, "closed mid-answer"
                buffer += chunk
            parsed.append((int(lines[0].split()[1]), headers, buffer[:length]))
            buffer = buffer[length:]
        return parsed


@pytest.mark.parametrize("loop,http", SERVERS, ids=["-".join(s) for s in SERVERS])
@pytest.mark.parametrize("first_body", [10, 200_000], ids=["small", "over-64k"])
def test_the_second_request_on_a_connection_meets_the_edge(loop, http, first_body):
    with serving(loop, http) as port, captured_access_lines() as lines:
        first, second = answers(
            port,
            post(b"x" * first_body, b"X-Request-ID: first-one")
            + post(b"{}", b"X-Request-ID: caf\xe9"),
            2,
        )
        time.sleep(0.2)  # the second line is written as its answer completes
    assert first[0] == 200 and json.loads(first[2])["bytes"] == first_body
    status, headers, body = second
    assert status == 400, body
    error = json.loads(body)["error"]
    assert error["code"] == "INVALID_HEADER" and headers["x-request-id"] == error["request_id"]
    logged = lines.entries()
    assert [entry["status"] for entry in logged] == [200, 400], logged


@pytest.mark.parametrize("loop,http", SERVERS, ids=["-".join(s) for s in SERVERS])
def test_an_unsafe_id_on_the_second_request_is_replaced(loop, http):
    with serving(loop, http) as port:
        _, (status, _, body) = answers(
            port, post(b"{}", b"X-Request-ID: ok-1") + post(b"{}", b'X-Request-ID: a"b'), 2
        )
    assert status == 200
    echoed = json.loads(body)["id"]
    assert len(echoed) == 32 and echoed.isalnum(), echoed


def chunks(total: int, size: int = 65_536) -> Iterator[bytes]:
    for _ in range(total // size):
        yield b"x" * size


@pytest.mark.parametrize("loop,http", SERVERS, ids=["-".join(s) for s in SERVERS])
def test_after_an_early_413_the_clients_next_request_succeeds(loop, http):
    """A chunked body over the limit is refused as it passes the limit; the answer says
    ``Connection: close`` and the server closes, so a pooling client (httpx) opens a new
    connection for its next request instead of failing on a dead one."""
    with serving(loop, http) as port, httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        refused = client.post("/echo", content=chunks(20 * LIMIT))
        assert refused.status_code == 413 and refused.headers["connection"] == "close"
        assert refused.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
        assert client.post("/echo", content=b"{}").json()["bytes"] == 2
        # Over a raw socket: the answer, then the server's close (EOF), no hang.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(post(b"x" * (LIMIT + 1)) + post(b"{}"))
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        assert data.startswith(b"HTTP/1.1 413") and data.count(b"HTTP/1.1") == 1, data[:300]
