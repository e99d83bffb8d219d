"""The edge: the first code that sees a request on every HTTP server of the service.

One pure ASGI middleware, outermost wherever a request enters Python: around the app itself
(``create_app``), and on Ray Serve around Serve's own request handling in the ingress
replicas' direct-ingress servers and Serve's Python proxy (``deployments.replicas.edge``),
where Serve decodes ``X-Request-ID`` as UTF-8 before any app code runs (a non-UTF-8 id was uvicorn's
plain-text 500). Here, once per request:

- every header value is checked: one that is not UTF-8 text without control characters is a
  400 ``INVALID_HEADER`` in the error envelope;
- ``X-Request-ID`` is made safe (``request_id_from``) and written back into the request, so
  every layer after this one logs and echoes the same safe id; the headers Ray Serve obeys
  (``SERVE_CONTROL_HEADERS``: its timeout, disconnect handling, multiplexing, affinity) are
  removed;
- the body is read under ``api.connections``' budget, on a clock that runs only while the
  edge waits for the client: a chunk stalled past the idle timeout, or a body below the floor
  rate past the grace period, is answered 408 with ``Connection: close`` and the request
  handed a disconnect. The budget is for request bodies only: a response may stream as long
  as the app streams;
- an answer that leaves before the declared body was read (a 401, a 413) carries
  ``Connection: close``: the rest of the body could otherwise trickle into a kept-alive
  connection for ever. Before its last byte the edge lingers: it reads and drops the rest
  of the body within ``api.connections``' linger bounds, so the close that follows is not a
  reset that destroys the answer in a client still sending (the whole body first, as most
  HTTP libraries send it);
- websocket upgrades are refused (close 1008; the app has none), after the header check and
  the id rewrite, with a WARNING access line;
- one access line (JSON, ``serve_app.access``) is written when the request ends: method,
  path, route, status, error code, request id, principal (key name or token subject, never a
  secret), tenant and latency. Success at INFO, refusals (4xx) at WARNING, failures (5xx) at
  ERROR; never a traceback. A client gone before the answer is 499 ``CLIENT_CLOSED``; an
  answer started but not finished keeps its status with code ``INCOMPLETE``. Health checks
  (``HEALTH_PATHS``) get a line only when they fail.

A second edge inside the first one's request (the app's own, behind Serve's) passes the
request through: the first one marked the request's scope (``request_record``). The mark is
on the scope, not in an ambient context: uvicorn starts a pipelined request from inside the
previous request's ``send()``, so a context variable set for that request was inherited by
the next one, which then went around the edge. A scope pickled to another process (Serve's
Python proxy hands it to a replica) arrives unmarked, so the app's edge there acts.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from serve_app.api.errors import error_response
from serve_app.api.observability import (
    CLIENT_CLOSED,
    CLIENT_CLOSED_STATUS,
    REQUEST_ID,
    request_id_from,
)
from serve_app.config import ApiConfig, ConnectionBudget
from serve_app.config.api import body_limit
from serve_app.errors import (
    InvalidHeaderError,
    PayloadTooLargeError,
    RequestTooSlowError,
    ServeAppError,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ACCESS = logging.getLogger("serve_app.access")
MAX_LOGGED_PATH = 512
# Load balancers' checks, every few seconds per replica: an access line only when they fail.
HEALTH_PATHS = frozenset({"/-/healthz", "/-/routes"})
INCOMPLETE = "INCOMPLETE"  # the answer started but did not finish
INTERNAL = ServeAppError.code
WEBSOCKET_REFUSED = "WEBSOCKET_REFUSED"
WS_POLICY_VIOLATION = 1008


@dataclass
class RequestRecord:
    """What the access line says of a request; the app fills in who and which route."""

    principal: str | None = None
    tenant: str | None = None
    route: str | None = None
    code: str | None = None
    client: str | None = None  # named by the front (``Edge.client_header``); else the peer
    extra: dict[str, Any] = field(default_factory=dict)


EDGE_MARK = "serve_app.edge"


class _Mark:
    """The edge's mark on a request's scope: the request's record, in this process only."""

    __slots__ = ("record",)

    def __init__(self, record: RequestRecord | None) -> None:
        self.record = record

    def __reduce__(self) -> tuple[type[_Mark], tuple[None]]:
        return (_Mark, (None,))  # another process's edge acts on its own


def request_record(scope: Scope) -> RequestRecord | None:
    """The record of the edge that took this request in this process, None before one did."""
    mark = scope.get(EDGE_MARK)
    return mark.record if isinstance(mark, _Mark) else None


def undecodable_header(scope: Scope) -> str | None:
    """The name of the first header whose value is not UTF-8 text without control characters
    (tab aside), None when every one is."""
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
    for key, value in headers:
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            return key.decode("latin-1")
        if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in text):
            return key.decode("latin-1")
    return None


# Headers Ray Serve obeys from whoever sends them (its request timeout, cancelling on
# disconnect, model multiplexing, session affinity; Serve compares "-" and "_" alike): a
# client must not switch off the service's own bounds, so the edge removes them.
# tests/deployments/replicas/test_edge_serve_headers.py holds this list to Ray's constants.
SERVE_CONTROL_HEADERS = frozenset(
    {
        "x-request-timeout-seconds",
        "x-request-disconnect-disabled",
        "serve-multiplexed-model-id",
        "x-session-id",
    }
)


def _with_request_id(
    headers: list[tuple[bytes, bytes]], request_id: str
) -> list[tuple[bytes, bytes]]:
    kept = [
        (k, v)
        for k, v in headers
        if k.lower() != b"x-request-id"
        and k.decode("latin-1").lower().replace("_", "-") not in SERVE_CONTROL_HEADERS
    ]
    return [*kept, (b"x-request-id", request_id.encode())]


class BodyTimer:
    """The request body's budget, on a clock that runs only while the edge waits for the
    client (the app's own delays between reads never count): each chunk within the idle
    timeout, and, past the grace period of waiting, enough bytes for the floor rate."""

    def __init__(self, budget: ConnectionBudget) -> None:
        self.budget = budget
        self.waited = 0.0
        self.received = 0

    def due_in(self) -> float:
        """How long the next chunk may be waited for."""
        budget = self.budget
        floor = budget.body_rate_grace_s + self.received / budget.body_min_rate_bytes_per_s
        return max(0.0, min(budget.body_idle_timeout_s, floor - self.waited))

    async def receive(self, receive: Receive) -> Message | None:
        """The next message from ``receive`` (at once when the server has it buffered),
        None when the budget runs out first."""
        pending = asyncio.ensure_future(receive())
        began = time.monotonic()
        try:
            done, _ = await asyncio.wait({pending}, timeout=self.due_in())
        finally:
            self.waited += time.monotonic() - began
            if not pending.done():
                pending.cancel()
        if not done:
            return None
        message = pending.result()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
        return message

    def describe(self) -> str:
        return (
            f"request body too slow: {self.received} bytes in {self.waited:.1f} s "
            f"(api.connections: a chunk every {self.budget.body_idle_timeout_s:g} s, "
            f"{self.budget.body_min_rate_bytes_per_s} bytes/s after "
            f"{self.budget.body_rate_grace_s:g} s)"
        )


class Edge:
    """See the module docstring. ``budget`` and ``api`` are read per request (callables), so
    the Serve layer can hand the configuration in once its replica has it. With ``api``, each
    route's body bytes are capped as they arrive (``config.api.body_limit``) and the budget is
    its ``connections`` unless ``budget`` is given."""

    def __init__(
        self,
        app: ASGIApp,
        budget: Callable[[], ConnectionBudget] | ConnectionBudget | None = None,
        log_passed: Callable[[], bool] | bool = True,
        api: Callable[[], ApiConfig] | ApiConfig | None = None,
        client_header: str | None = None,
    ) -> None:
        self.app = app
        self._budget = budget
        self._log_passed = log_passed
        self._api = api
        # A header that the front this server sits behind sets on every request, naming its
        # client (HAProxy's ``X-Serve-App-Client``, deployments.local.instance.client_rules);
        # None: the connection's peer is the client.
        self.client_header = client_header.lower().encode() if client_header else None

    def api(self) -> ApiConfig | None:
        return self._api() if callable(self._api) else self._api

    def body_limit(self, scope: Scope) -> tuple[int, str] | None:
        """The request's byte cap and the setting that sets it; None without ``api``."""
        api = self.api()
        if api is None:
            return None
        return body_limit(api, str(scope.get("method", "")), _route_path(scope))

    def log_passed(self) -> bool:
        """Whether the requests this edge passes on get their access line here (False in a
        proxy: the app's own edge, in the replica, writes it with the principal)."""
        return self._log_passed() if callable(self._log_passed) else self._log_passed

    def budget(self) -> ConnectionBudget:
        if self._budget is None:
            api = self.api()
            return api.connections if api is not None else ConnectionBudget()
        return self._budget() if callable(self._budget) else self._budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or request_record(scope) is not None:
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        record = RequestRecord()
        scope[EDGE_MARK] = _Mark(record)
        if self.client_header is not None:
            record.client = _named_client(raw_header(scope, self.client_header))
        bad_header = undecodable_header(scope)
        sent_id = None if bad_header else raw_header(scope, b"x-request-id")
        request_id = request_id_from(sent_id)
        scope["headers"] = _with_request_id(list(scope.get("headers", ())), request_id)
        id_token = REQUEST_ID.set(request_id)
        try:
            if scope["type"] == "websocket":
                await _refuse_websocket(scope, record, began, bad_header, send)
            else:
                await self._http(scope, receive, send, record, began, request_id, bad_header)
        finally:
            REQUEST_ID.reset(id_token)

    async def _http(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        record: RequestRecord,
        began: float,
        request_id: str,
        bad_header: str | None,
    ) -> None:
        status = 500
        started = completed = logged = client_left = False
        refused: ServeAppError | None = None
        health_check = _route_path(scope) in HEALTH_PATHS

        def write_line(level: int | None = None) -> None:
            # Before the last byte of the answer leaves: a client that has its answer finds
            # its line, whatever happens to this process next.
            nonlocal logged
            if logged or (health_check and status < 400):
                return
            if refused is not None or self.log_passed():
                logged = True
                _log_access(scope, record, status, time.perf_counter() - began, level)

        async def out(message: Message) -> None:
            """Every message to the client, the app's and the edge's own."""
            nonlocal started, completed, status, client_left
            if message["type"] == "http.response.start":
                started = True
                status = message["status"]
                if not body_done and has_body:  # the rest could trickle in after the answer
                    message = {**message, "headers": _with_close(message.get("headers", ()))}
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                if has_body and not body_done and not client_left and not timed_out:
                    if message.get("body"):
                        await send({**message, "more_body": True})
                    await linger()
                    message = {"type": "http.response.body", "body": b"", "more_body": False}
                completed = True
                write_line()
            try:
                await send(message)
            except OSError:
                client_left = True
                raise

        async def send_error(error: ServeAppError, close: bool = False) -> None:
            nonlocal refused
            refused = error
            record.code = error.code
            headers = {"x-request-id": request_id, **({"connection": "close"} if close else {})}
            await error_response(error, headers=headers)({"type": "http"}, _disconnected, out)

        async def guarded_send(message: Message) -> None:
            if refused is None:  # else the app's answer after the edge answered for it
                await out(message)

        timer = BodyTimer(self.budget())
        body_done = timed_out = False
        has_body = _declares_body(scope)
        limit = self.body_limit(scope)

        def too_large(received: str) -> PayloadTooLargeError:
            assert limit is not None
            allowed, setting = limit
            return PayloadTooLargeError(
                f"request body of {received} bytes is over the limit of {allowed} for "
                f"{scope.get('method')} {_route_path(scope)[:200]} ({setting})"
            )

        async def linger() -> None:
            """The rest of a body the answer did not need, read and dropped within the
            linger bounds (and the idle timeout per chunk) before the answer's last byte: the server closes the connection
            after it, and closing on unread bytes is a reset that can destroy the answer
            in the client's buffers while the client is still sending."""
            nonlocal body_done
            budget = self.budget()
            deadline = time.monotonic() + budget.linger_s
            dropped = 0
            while not body_done and dropped <= budget.linger_max_bytes:
                wait = min(deadline - time.monotonic(), budget.body_idle_timeout_s)
                try:
                    message = await asyncio.wait_for(receive(), wait)
                except TimeoutError:
                    return
                if message["type"] != "http.request":
                    return
                dropped += len(message.get("body", b""))
                body_done = not message.get("more_body", False)

        async def timed_receive() -> Message:
            nonlocal body_done, client_left, timed_out
            if refused is not None:
                return {"type": "http.disconnect"}
            message: Message | None
            if body_done:
                message = await receive()  # waiting for a disconnect: no budget applies
            else:
                message = await timer.receive(receive)
                if message is None:
                    timed_out = True
                    error: ServeAppError = RequestTooSlowError(timer.describe())
                    if not started:
                        await send_error(error, close=True)
                    else:  # already answered: the app stops reading; the server closes
                        record.code = error.code
                    return {"type": "http.disconnect"}
                if message["type"] == "http.request":
                    body_done = not message.get("more_body", False)
                    if limit is not None and timer.received > limit[0]:
                        # Not one byte more from the client: the app (and Serve, which reads
                        # ahead into a queue) is told the client left.
                        error = too_large(f"more than {limit[0]}")
                        if not started:
                            await send_error(error, close=True)
                        else:
                            record.code = error.code
                        return {"type": "http.disconnect"}
            if message["type"] == "http.disconnect":
                client_left = True
            return message

        failed = False
        try:
            declared = raw_header(scope, b"content-length")
            if bad_header is not None:
                await send_error(
                    InvalidHeaderError(
                        f"header {bad_header!r} is not UTF-8 text without control characters"
                    )
                )
            elif limit is not None and limit[0] == 0 and has_body:
                await send_error(too_large("any"), close=True)  # a route that takes none
            elif (
                limit is not None
                and declared is not None
                and declared.strip().isdigit()
                and int(declared) > limit[0]
            ):
                await send_error(too_large(declared.strip()), close=True)
            else:
                await self.app(scope, timed_receive, guarded_send)
        except asyncio.CancelledError:
            client_left = True
            raise
        except BaseException:
            failed = True
            raise
        finally:
            # No complete answer: the client left, or the app failed.
            if not started:
                status = CLIENT_CLOSED_STATUS if client_left and not failed else 500
                record.code = CLIENT_CLOSED if status == CLIENT_CLOSED_STATUS else INTERNAL
                write_line()
            elif not completed:
                record.code = record.code or INCOMPLETE
                write_line(logging.ERROR if failed else logging.WARNING)


async def _refuse_websocket(
    scope: Scope, record: RequestRecord, began: float, bad_header: str | None, send: Send
) -> None:
    """The app has no websocket routes: every upgrade is refused here (the server answers
    403), after the header check and the id rewrite, so Serve never decodes the raw id."""
    record.code = InvalidHeaderError.code if bad_header else WEBSOCKET_REFUSED
    await send({"type": "websocket.close", "code": WS_POLICY_VIOLATION})
    _log_access(scope, record, 403, time.perf_counter() - began, logging.WARNING)


def _route_path(scope: Scope) -> str:
    path, root = str(scope.get("path", "")), str(scope.get("root_path", ""))
    return path[len(root) :] if root and path.startswith(root) else path


def _declares_body(scope: Scope) -> bool:
    """Whether the request says a body follows (a Content-Length over 0, or chunked)."""
    length = raw_header(scope, b"content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return raw_header(scope, b"transfer-encoding") is not None


def _with_close(headers: Any) -> list[tuple[bytes, bytes]]:
    kept = [(k, v) for k, v in headers if k.lower() != b"connection"]
    return [*kept, (b"connection", b"close")]


def raw_header(scope: Scope, name: bytes) -> str | None:
    """The first value of the header ``name`` (lower case) as latin-1 text, or None."""
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _logged_path(scope: Scope) -> str:
    """The path as the client sent it (percent-encoding kept: a decoded ``%2F`` or ``%0A``
    would make the line say another path), bounded."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else str(scope.get("path", ""))
    return path[:MAX_LOGGED_PATH]


async def _disconnected() -> Message:
    return {"type": "http.disconnect"}


def _named_client(value: str | None) -> str | None:
    """The address a front named, or None when it named none (or something else)."""
    try:
        return str(ipaddress.ip_address((value or "").strip()))
    except ValueError:
        return None


def _log_access(
    scope: Scope, record: RequestRecord, status: int, seconds: float, level: int | None = None
) -> None:
    if level is None:
        level = logging.INFO if status < 400 else logging.WARNING if status < 500 else logging.ERROR
    client = scope.get("client")
    peer = f"{client[0]}:{client[1]}" if client else None
    ACCESS.log(
        level,
        "request",
        extra={
            "method": scope.get("method"),
            "path": _logged_path(scope),
            "route": record.route or "unmatched",
            "status": status,
            "code": record.code,
            "principal": record.principal,
            "tenant": record.tenant,
            "client": record.client or peer,
            "duration_ms": round(seconds * 1000, 2),
        },
    )
