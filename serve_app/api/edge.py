"""The edge: the first code that sees a request on every HTTP server of the service.

One pure ASGI middleware, outermost wherever a request enters Python: around the app itself
(``create_app``), and on Ray Serve around Serve's own request handling in the ingress
replicas' direct-ingress servers and Serve's Python proxy (``deployments.edge``), where Serve
decodes ``X-Request-ID`` as UTF-8 before any app code runs (a non-UTF-8 id was uvicorn's
plain-text 500). Here, once per request:

- every header value is checked: one that is not UTF-8 text without control characters is a
  400 ``INVALID_HEADER`` in the error envelope;
- ``X-Request-ID`` is made safe (``request_id_from``) and written back into the request, so
  every layer after this one logs and echoes the same safe id;
- the body is read under ``api.connections``' budget: a chunk stalled past the idle timeout,
  or a body below the floor rate past the grace period, is answered 408 with
  ``Connection: close`` and the request handed a disconnect;
- one access line (JSON, ``serve_app.access``) is written when the request ends: method,
  path, route, status, error code, request id, principal (key name or token subject, never a
  secret), tenant and latency. Success at INFO, refusals (4xx) at WARNING, failures (5xx) at
  ERROR; never a traceback.

A second edge inside the first one's request (the app's own, behind Serve's) passes the
request through: ``CURRENT`` is set.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from serve_app.api.errors import error_response
from serve_app.api.observability import REQUEST_ID, request_id_from
from serve_app.config import ConnectionBudget
from serve_app.errors import InvalidHeaderError, RequestTooSlowError, ServeAppError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ACCESS = logging.getLogger("serve_app.access")
MAX_LOGGED_PATH = 512


@dataclass
class RequestRecord:
    """What the access line says of a request; the app fills in who and which route."""

    principal: str | None = None
    tenant: str | None = None
    route: str | None = None
    code: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


CURRENT: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar(
    "edge_request", default=None
)


def undecodable_header(scope: Scope) -> str | None:
    """The name of the first header whose value is not UTF-8 text without control characters
    (tab aside), None when every one is."""
    for key, value in scope.get("headers", ()):
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            return key.decode("latin-1")
        if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in text):
            return key.decode("latin-1")
    return None


def _with_request_id(headers: list[tuple[bytes, bytes]], request_id: str) -> list:
    kept = [(k, v) for k, v in headers if k.lower() != b"x-request-id"]
    return [*kept, (b"x-request-id", request_id.encode())]


class BodyTimer:
    """When the next body chunk is due under ``budget``: within the idle timeout of the last
    one, and, past the grace period, soon enough that the body averages the floor rate
    counted from the end of the grace period."""

    def __init__(self, budget: ConnectionBudget, now: float) -> None:
        self.budget = budget
        self.started = now
        self.last = now
        self.received = 0

    def arrived(self, size: int, now: float) -> None:
        self.received += size
        self.last = now

    def due(self) -> float:
        budget = self.budget
        idle = self.last + budget.body_idle_timeout_s
        floor = (
            self.started
            + budget.body_rate_grace_s
            + self.received / budget.body_min_rate_bytes_per_s
        )
        return min(idle, floor)

    def describe(self, now: float) -> str:
        return (
            f"request body too slow: {self.received} bytes in {now - self.started:.1f} s "
            f"(api.connections: a chunk every {self.budget.body_idle_timeout_s:g} s, "
            f"{self.budget.body_min_rate_bytes_per_s} bytes/s after "
            f"{self.budget.body_rate_grace_s:g} s)"
        )


class Edge:
    """See the module docstring. ``budget`` is read per request (a callable), so the Serve
    layer can hand the configuration in once its replica has it."""

    def __init__(
        self,
        app: ASGIApp,
        budget: Callable[[], ConnectionBudget] | ConnectionBudget | None = None,
        log_passed: Callable[[], bool] | bool = True,
    ) -> None:
        self.app = app
        self._budget = budget if budget is not None else ConnectionBudget()
        self._log_passed = log_passed

    def log_passed(self) -> bool:
        """Whether the requests this edge passes on get their access line here (False in a
        proxy: the app's own edge, in the replica, writes it with the principal)."""
        return self._log_passed() if callable(self._log_passed) else self._log_passed

    def budget(self) -> ConnectionBudget:
        return self._budget() if callable(self._budget) else self._budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or CURRENT.get() is not None:
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        record = RequestRecord()
        record_token = CURRENT.set(record)
        bad_header = undecodable_header(scope)
        sent_id = None if bad_header else _raw_header(scope, b"x-request-id")
        request_id = request_id_from(sent_id)
        scope["headers"] = _with_request_id(list(scope.get("headers", ())), request_id)
        id_token = REQUEST_ID.set(request_id)
        status = 500
        started = logged = False
        refused: ServeAppError | None = None

        def write_line() -> None:
            # Before the last byte of the answer leaves: a client that has its answer finds
            # its line, whatever happens to this process next.
            nonlocal logged
            if not logged and (refused is not None or self.log_passed()):
                logged = True
                _log_access(scope, record, status, time.perf_counter() - began)

        async def send_error(error: ServeAppError, close: bool = False) -> None:
            nonlocal refused, status
            refused = error
            status = error.status
            record.code = error.code
            write_line()
            headers = {"x-request-id": request_id, **({"connection": "close"} if close else {})}
            await error_response(error, headers=headers)({"type": "http"}, _disconnected, send)

        async def guarded_send(message: Message) -> None:
            nonlocal status, started
            if refused is not None:
                return  # the app's answer after the edge answered for it
            if message["type"] == "http.response.start":
                started = True
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                write_line()
            await send(message)

        timer = BodyTimer(self.budget(), time.monotonic())
        body_done = False

        async def timed_receive() -> Message:
            nonlocal body_done
            if refused is not None:
                return {"type": "http.disconnect"}
            if body_done:
                return await receive()  # waiting for a disconnect: no budget applies
            left = timer.due() - time.monotonic()
            try:
                message = await asyncio.wait_for(receive(), max(left, 0.0))
            except TimeoutError:
                error = RequestTooSlowError(timer.describe(time.monotonic()))
                if not started:
                    await send_error(error, close=True)
                else:  # already answered: the app stops reading; the server closes
                    record.code = error.code
                return {"type": "http.disconnect"}
            if message["type"] == "http.request":
                timer.arrived(len(message.get("body", b"")), time.monotonic())
                body_done = not message.get("more_body", False)
            return message

        try:
            if bad_header is not None:
                await send_error(
                    InvalidHeaderError(
                        f"header {bad_header!r} is not UTF-8 text without control characters"
                    )
                )
            else:
                await self.app(scope, timed_receive, guarded_send)
        finally:
            write_line()  # no complete answer: an error, a disconnect
            REQUEST_ID.reset(id_token)
            CURRENT.reset(record_token)


def _raw_header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _disconnected() -> Message:
    return {"type": "http.disconnect"}


def _log_access(scope: Scope, record: RequestRecord, status: int, seconds: float) -> None:
    level = logging.INFO if status < 400 else logging.WARNING if status < 500 else logging.ERROR
    client = scope.get("client")
    ACCESS.log(
        level,
        "request",
        extra={
            "method": scope.get("method"),
            "path": str(scope.get("path", ""))[:MAX_LOGGED_PATH],
            "route": record.route or "unmatched",
            "status": status,
            "code": record.code,
            "principal": record.principal,
            "tenant": record.tenant,
            "client": f"{client[0]}:{client[1]}" if client else None,
            "duration_ms": round(seconds * 1000, 2),
        },
    )
