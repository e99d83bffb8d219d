"""Pure ASGI middleware, outermost first (inside the edge, ``serve_app.api.edge``): the request
envelope (id, metrics, what the access line says of the request, last resort 500), the body limit on bytes actually received, and authentication before any body
byte is read.

Pure ASGI (not ``BaseHTTPMiddleware``): the body limit must sit on ``receive`` itself, and
nothing here may buffer a body or move the request into another task.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.requests import ClientDisconnect

from serve_app.api.auth import Authenticator, Principal
from serve_app.api.browser import BrowserRules
from serve_app.api.edge import raw_header, request_record
from serve_app.api.errors import ERROR_CODE, error_response, for_status
from serve_app.api.observability import (
    CLIENT_CLOSED,
    CLIENT_CLOSED_STATUS,
    REQUEST_ID,
    Metrics,
    Stopwatch,
    request_id_from,
)
from serve_app.errors import PayloadTooLargeError, RequestTooSlowError, ServeAppError
from serve_app.service.tenant_limits import TenantRates

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("serve_app.api")


def route_path(scope: Scope) -> str:
    """The path below the app's mount point (Serve's route prefix, a ``root_path``)."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


async def _send_error(send: Send, error: ServeAppError) -> None:
    response = error_response(error)
    await response({"type": "http"}, _no_body, send)


async def _no_body() -> Message:
    return {"type": "http.disconnect"}


# The edge's refusals while the body streams (it tells the app the client left).
EDGE_REFUSALS: dict[str | None, type[ServeAppError]] = {
    RequestTooSlowError.code: RequestTooSlowError,
    PayloadTooLargeError.code: PayloadTooLargeError,
}


class RequestEnvelope:
    """Request id (the edge made it safe), X-Request-ID on the answer, latency and error
    metrics, the route, principal and error code for the edge's access line; an error
    escaping the app becomes the INTERNAL envelope, except a body the client did not finish
    sending (``ClientDisconnect``): counted 408 when the edge timed it out, else 499, without
    a traceback."""

    def __init__(self, app: ASGIApp, metrics: Metrics, set_request_id_header: bool) -> None:
        self.app = app
        self.metrics = metrics
        self.set_header = set_request_id_header

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_from(raw_header(scope, b"x-request-id"))
        token = REQUEST_ID.set(request_id)
        box: dict[str, str] = {}
        code_token = ERROR_CODE.set(box)
        watch = Stopwatch()
        status = 500
        started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                started = True
                status = message["status"]
                _describe(scope, box)  # before the answer leaves (the edge logs it then)
                if self.set_header:
                    headers = [
                        (k, v)
                        for k, v in message.get("headers", [])
                        if k.lower() != b"x-request-id"
                    ]
                    headers.append((b"x-request-id", request_id.encode()))
                    message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except ClientDisconnect:
            # Expected, not a failure of ours: the edge timed the body out (its 408 is out)
            # or the client left mid-upload; the edge's access line says which.
            record = request_record(scope)
            refusal = EDGE_REFUSALS.get(record.code if record is not None else None)
            if refusal is not None:
                status, box["code"] = refusal.status, refusal.code
            elif not started:
                status, box["code"] = CLIENT_CLOSED_STATUS, CLIENT_CLOSED
        except Exception:
            log.exception("unhandled error")
            if not started:
                await _send_error(send_wrapper, ServeAppError("internal error; see the server log"))
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", "unmatched")
            seconds = watch.seconds()
            self.metrics.observe_request(endpoint, scope.get("method", ""), status, seconds)
            if status >= 400:
                self.metrics.errors.labels(box.get("code") or for_status(status).code).inc()
            ERROR_CODE.reset(code_token)
            REQUEST_ID.reset(token)


def _describe(scope: Scope, box: dict[str, str]) -> None:
    """The route, error code and principal of the request, for the edge's access line."""
    record = request_record(scope)
    if record is None:
        return
    record.route = getattr(scope.get("route"), "path", "unmatched")
    record.code = box.get("code") or record.code
    principal = scope.get("state", {}).get("principal")
    if isinstance(principal, Principal):
        record.principal, record.tenant = principal.subject, principal.tenant_id


class BrowserGuard:
    """``BrowserRules`` before the app reads the body: a refused request is answered at once
    (in the envelope, so it is counted and logged like any refusal)."""

    def __init__(self, app: ASGIApp, rules: BrowserRules) -> None:
        self.app = app
        self.rules = rules

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                self.rules.check(
                    str(scope.get("method", "")),
                    raw_header(scope, b"host"),
                    raw_header(scope, b"origin"),
                    raw_header(scope, b"sec-fetch-site"),
                )
            except ServeAppError as error:
                await _send_error(send, error)
                return
        await self.app(scope, receive, send)


class Authenticate:
    """Credentials checked from the headers before the app (and its body parsing) runs, for
    every path under ``prefixes``; the principal goes to ``scope["state"]["principal"]``, and
    its tenant's request rate is charged (``TenantRates.request``: 429 past it)."""

    def __init__(
        self,
        app: ASGIApp,
        authenticator: Authenticator,
        rates: TenantRates | None = None,
        prefixes: tuple[str, ...] = ("/v1/",),
    ) -> None:
        self.app = app
        self.authenticator = authenticator
        self.rates = rates
        self.prefixes = prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not route_path(scope).startswith(self.prefixes):
            await self.app(scope, receive, send)
            return
        try:
            principal = self.authenticator.authenticate(
                raw_header(scope, b"authorization"), raw_header(scope, b"x-api-key")
            )
            scope["state"] = {**scope.get("state", {}), "principal": principal}
            if self.rates is not None:
                self.rates.request(principal.tenant_id)
        except ServeAppError as error:
            await _send_error(send, error)
            return
        await self.app(scope, receive, send)
