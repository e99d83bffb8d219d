"""The edge's contract with the server in front and the app behind it, at the ASGI level with
small apps (no models): an answer sent before the body was read closes the connection;
websockets are refused with 1008 after the header check; a request that does not finish is
logged as such (499 CLIENT_CLOSED, INCOMPLETE), and a client that drops mid-upload is no
500; the body budget counts only the time spent waiting for the client and never touches a
response stream; health checks write no access line."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from serve_app.api.edge import Edge
from serve_app.api.middleware import RequestEnvelope
from serve_app.api.observability import Metrics
from serve_app.config import ConnectionBudget
from tests.support.access_log import captured_access_lines

pytestmark = pytest.mark.asyncio(loop_scope="session")

BUDGET = ConnectionBudget(
    body_idle_timeout_s=0.2, body_min_rate_bytes_per_s=2_000, body_rate_grace_s=0.3
)


def http_scope(path: str = "/v1/documents", body_length: int | None = 10, **extra) -> dict:
    headers = [(b"content-type", b"application/json")]
    if body_length is not None:
        headers.append((b"content-length", str(body_length).encode()))
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": "POST" if body_length is not None else "GET", "scheme": "http",
        "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
        "client": ("127.0.0.1", 1), "server": ("t", 80), "state": {}, "headers": headers,
        **extra,
    }  # fmt: skip


class Client:
    """The server's side of one request: ``chunks`` of body, each after ``every_s`` (all
    buffered at once with 0), then nothing until ``leave_after_s`` (a disconnect) or never;
    ``stalls``: the last chunk says more is coming."""

    def __init__(
        self,
        chunks: list[bytes],
        every_s: float = 0.0,
        leave_after_s: float | None = None,
        stalls: bool = False,
    ) -> None:
        # A request without a body still gets one empty body message first, as from uvicorn.
        self.chunks = list(chunks) or [b""]
        self.every_s, self.leave_after_s = every_s, leave_after_s
        self.stalls = stalls
        self.sent: list[dict] = []

    async def receive(self) -> dict:
        if self.chunks:
            await asyncio.sleep(self.every_s)
            body = self.chunks.pop(0)
            return {
                "type": "http.request",
                "body": body,
                "more_body": bool(self.chunks) or self.stalls,
            }
        if self.leave_after_s is None:
            await asyncio.Event().wait()
        await asyncio.sleep(self.leave_after_s)
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        self.sent.append(message)

    @property
    def start(self) -> dict:
        return next(m for m in self.sent if m["type"] == "http.response.start")

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


async def answer_at_once(scope, receive, send) -> None:
    await JSONResponse({"error": {"code": "UNAUTHENTICATED"}}, status_code=401)(
        scope, receive, send
    )


async def read_then_answer(scope, receive, send) -> None:
    more = True
    while more:
        message = await receive()
        assert message["type"] == "http.request", message
        more = message.get("more_body", False)
    await JSONResponse({"ok": True})(scope, receive, send)


async def test_an_answer_before_the_body_was_read_closes_the_connection():
    # A refusal (401, 413) before any body byte is read: the rest of the body may trickle in
    # forever after it, so the server must close the connection once the answer is out.
    client = Client([b"0123456789"])
    await Edge(answer_at_once, BUDGET)(http_scope(), client.receive, client.send)
    assert client.start["status"] == 401
    assert (b"connection", b"close") in client.start["headers"]


class Counted(Client):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.pulled = 0
        self.pulled_before_last_byte: int | None = None

    async def receive(self) -> dict:
        message = await super().receive()
        self.pulled += len(message.get("body", b""))
        return message

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body"):
            self.pulled_before_last_byte = self.pulled
        await super().send(message)


@pytest.mark.parametrize(
    "budget,chunks,every_s,dropped",
    [
        (BUDGET, 50, 0.0, (50_000, 50_000)),  # the whole rest, then the last byte
        (BUDGET.model_copy(update={"linger_max_bytes": 10_000}), 50, 0.0, (11_000, 11_000)),
        (BUDGET.model_copy(update={"linger_s": 0.25}), 50, 0.1, (1_000, 4_000)),  # 2 on time
        (BUDGET, 50, 0.5, (0, 0)),  # past the idle timeout per chunk
    ],
    ids=["all", "max-bytes", "max-time", "idle"],
)
async def test_an_early_answer_drops_the_rest_of_the_body_within_the_linger_bounds(
    budget, chunks, every_s, dropped
):
    # Its answer's bytes go out first; its last byte (and the close) after the drop, so the
    # close is not a reset over unread bytes.
    client = Counted([b"x" * 1000] * chunks, every_s=every_s, stalls=True)
    await asyncio.wait_for(
        Edge(answer_at_once, budget)(http_scope(body_length=10**9), client.receive, client.send),
        5,
    )
    assert client.start["status"] == 401 and b"UNAUTHENTICATED" in client.body
    assert client.sent[1]["more_body"] and client.sent[1]["body"]
    low, high = dropped
    assert low <= client.pulled_before_last_byte <= high


async def test_keep_alive_is_kept_when_the_body_was_read_or_there_is_none():
    read = Client([b"{}"])
    await Edge(read_then_answer, BUDGET)(http_scope(body_length=2), read.receive, read.send)
    no_body = Client([])
    await Edge(answer_at_once, BUDGET)(http_scope(body_length=None), no_body.receive, no_body.send)
    for client in (read, no_body):
        assert all(k != b"connection" for k, _ in client.start["headers"]), client.start


@pytest.mark.parametrize("sent_id", [b"\xff\xfe", b"x" * 8_000 + b'"\\r\\n'])
async def test_a_websocket_is_refused_with_1008_after_the_header_check(sent_id):
    reached: list[dict] = []

    async def app(scope, receive, send) -> None:
        reached.append(scope)

    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "websocket.connect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "websocket", "asgi": {"version": "3.0"}, "scheme": "ws", "path": "/v1/search",
        "raw_path": b"/v1/search", "root_path": "", "query_string": b"", "subprotocols": [],
        "client": ("127.0.0.1", 1), "server": ("t", 80), "headers": [(b"x-request-id", sent_id)],
    }  # fmt: skip
    await Edge(app, BUDGET)(scope, receive, send)
    assert reached == []
    assert sent == [{"type": "websocket.close", "code": 1008}]
    [(_, request_id)] = [(k, v) for k, v in scope["headers"] if k == b"x-request-id"]
    assert request_id != sent_id and len(request_id) <= 128


@pytest.mark.parametrize(
    ("sent_id", "code"), [(b'q"uote', "WEBSOCKET_REFUSED"), (b"\xff", "INVALID_HEADER")]
)
async def test_the_websocket_access_line_says_refused(sent_id, code):
    async def receive() -> dict:
        return {"type": "websocket.connect"}

    async def send(message: dict) -> None:
        pass

    scope = {
        "type": "websocket", "path": "/ws", "root_path": "", "client": ("127.0.0.1", 1),
        "headers": [(b"x-request-id", sent_id)],
    }  # fmt: skip
    with captured_access_lines() as access:
        await Edge(answer_at_once, BUDGET)(scope, receive, send)
    [line] = access.entries()
    assert line["level"] == "WARNING" and line["status"] == 403, line
    assert line["code"] == code and line["path"] == "/ws", line
    assert line["request_id"] not in (sent_id.decode("latin-1"), None)


def envelope_app() -> tuple[Edge, Metrics]:
    metrics = Metrics()
    app = FastAPI()

    @app.post("/v1/documents")
    async def ingest(request: Request) -> dict:
        return {"bytes": len(await request.body())}

    app.add_middleware(RequestEnvelope, metrics=metrics, set_request_id_header=True)
    return Edge(app, BUDGET), metrics


def errors_counted(metrics: Metrics) -> dict[str, float]:
    registry = metrics.instruments.registry  # type: ignore[attr-defined]
    return {
        sample.labels["code"]: sample.value
        for family in registry.collect()
        if family.name == "serve_app_errors"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


async def test_a_client_that_drops_mid_upload_is_499_without_a_traceback(caplog):
    edge, metrics = envelope_app()
    client = Client([b"{"], leave_after_s=0.01, stalls=True)  # one byte of ten, then gone
    with caplog.at_level(logging.INFO, logger="serve_app.api"):
        await edge(http_scope(), client.receive, client.send)
    assert not [r for r in caplog.records if r.name == "serve_app.api" and r.exc_info]
    assert errors_counted(metrics) == {"CLIENT_CLOSED": 1.0}


async def test_a_stalled_upload_is_counted_408_not_500(caplog):
    edge, metrics = envelope_app()
    client = Client([b"{"], stalls=True)  # then nothing
    with caplog.at_level(logging.INFO, logger="serve_app.api"):
        await asyncio.wait_for(edge(http_scope(), client.receive, client.send), 5)
    assert client.start["status"] == 408
    assert not [r for r in caplog.records if r.name == "serve_app.api" and r.exc_info]
    assert errors_counted(metrics) == {"REQUEST_TIMEOUT": 1.0}


async def run_logged(app, client: Client, scope: dict) -> dict:
    with captured_access_lines() as access, contextlib.suppress(RuntimeError):
        # RuntimeError: the app's own failure, re-raised
        await asyncio.wait_for(Edge(app, BUDGET)(scope, client.receive, client.send), 5)
    lines = access.entries()
    assert len(lines) <= 1, lines
    return lines[0] if lines else {}


async def wait_for_disconnect(scope, receive, send) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def fail_before_answering(scope, receive, send) -> None:
    raise RuntimeError("boom")


async def stream_until_gone(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
    await wait_for_disconnect(scope, receive, send)


async def stream_then_fail(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
    raise RuntimeError("boom")


@pytest.mark.parametrize(
    ("app", "level", "status", "code"),
    [
        (wait_for_disconnect, "WARNING", 499, "CLIENT_CLOSED"),
        (fail_before_answering, "ERROR", 500, "INTERNAL"),
        (stream_until_gone, "WARNING", 200, "INCOMPLETE"),
        (stream_then_fail, "ERROR", 200, "INCOMPLETE"),
    ],
)
async def test_the_access_line_of_a_request_that_does_not_finish(app, level, status, code):
    line = await run_logged(app, Client([], leave_after_s=0.05), http_scope(body_length=None))
    assert (line["level"], line["status"], line["code"]) == (level, status, code), line


async def test_the_body_timer_counts_only_the_time_spent_waiting_for_the_client():
    # The whole body is buffered at once; the app reads it after a delay of its own longer
    # than the idle timeout: no 408.
    async def slow_reader(scope, receive, send) -> None:
        await asyncio.sleep(BUDGET.body_idle_timeout_s * 1.5)
        await read_then_answer(scope, receive, send)

    client = Client([b"{", b"}"])
    await Edge(slow_reader, BUDGET)(http_scope(body_length=2), client.receive, client.send)
    assert client.start["status"] == 200, client.body


async def test_a_fair_paced_upload_past_the_grace_period_is_accepted():
    # 100 bytes every 0.04 s is 2,500 bytes/s, above the floor of 2,000, for 1.2 s: four
    # times the grace period.
    client = Client([b" " * 100] * 30, every_s=0.04)
    await Edge(read_then_answer, BUDGET)(http_scope(body_length=3000), client.receive, client.send)
    assert client.start["status"] == 200, client.body


async def test_a_response_stream_longer_than_the_body_idle_timeout_passes_untouched():
    # An SSE-like answer: events every 0.1 s for 1 s (five idle timeouts), the app listening
    # for a disconnect meanwhile; the body budget applies to request bodies only.
    events = [f"data: {i}\n\n".encode() for i in range(10)]

    async def sse(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        listener = asyncio.ensure_future(wait_for_disconnect(scope, receive, send))
        for event in events:
            await asyncio.sleep(0.1)
            assert not listener.done(), "the edge handed the stream a disconnect"
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        listener.cancel()

    client = Client([])
    line = await run_logged(sse, client, http_scope(path="/v1/answers", body_length=None))
    assert client.start["status"] == 200
    assert client.body == b"".join(events)
    assert all(m.get("type") != "http.disconnect" for m in client.sent)
    assert (line["status"], line["code"], line["level"]) == (200, None, "INFO"), line


@pytest.mark.parametrize("path", ["/-/healthz", "/-/routes"])
async def test_health_checks_write_no_access_line(path):
    async def healthy(scope, receive, send) -> None:
        await JSONResponse({"ok": True})(scope, receive, send)

    client = Client([])
    assert await run_logged(healthy, client, http_scope(path=path, body_length=None)) == {}
    assert client.start["status"] == 200


async def test_uvicorn_closes_the_connection_after_an_early_answer():
    # The real server: a 401 before the body, then the client keeps trickling; uvicorn must
    # close the connection rather than keep it alive for the trickle.
    import socket

    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            Edge(answer_at_once, BUDGET), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    serving = asyncio.ensure_future(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.02)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/documents HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\n{")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 401") and b"connection: close" in head.lower()
        writer.write(b" ")  # the trickle goes on
        await writer.drain()
        rest = await asyncio.wait_for(reader.read(), 5)  # EOF: the server closed
        assert rest.endswith(b"}")
        writer.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 5)


@pytest.mark.parametrize(
    ("client_header", "named", "logged"),
    [
        ("X-Serve-App-Client", b"203.0.113.9", "203.0.113.9"),  # the front named it
        ("X-Serve-App-Client", b"2001:db8::7", "2001:db8::7"),
        ("X-Serve-App-Client", b"evil\x1b[31m", "127.0.0.1:1"),  # no address: the peer
        (None, b"203.0.113.9", "127.0.0.1:1"),  # no front that sets it: a client's own
    ],
)
async def test_the_client_is_the_one_the_front_names_or_the_peer(client_header, named, logged):
    scope = http_scope(path="/healthz-not", body_length=None)
    scope["headers"].append((b"x-serve-app-client", named))

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        pass

    with captured_access_lines() as access:
        await Edge(answer_at_once, BUDGET, client_header=client_header)(scope, receive, send)
    [line] = access.entries()
    assert line["client"] == logged, line
