"""A running service's HTTP API as a client: what ``serve-app --url`` commands and the MCP
server call instead of opening the index themselves.

One bounded request at a time per call; each sends its own ``X-Request-ID`` and
``X-Request-Timeout-Ms`` (so the service gives up too). An API error comes back as
``ApiCallError`` with the API's code, message and request id."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import quote

import anyio
import httpx

from serve_app.errors import InvalidInputError, ServeAppError
from serve_app.pipelines.answer_events import (
    AnswerDone,
    AnswerError,
    AnswerEvent,
    AnswerMetadata,
    parse_event,
)


def path_segment(value: str, what: str) -> str:
    """``value`` as one segment of an API path: percent-encoded, so a ``/``, ``?`` or ``#``
    in it cannot start another segment or the query; ``.`` and ``..`` refused, because
    httpx resolves dot segments (``documents/../../x`` was the route of collection ``x``)."""
    if value in ("", ".", "..") or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidInputError(f"{what} {value[:100]!r} cannot be part of a path", param=what)
    return quote(value, safe="")


def collection_resource(collection: str) -> str:
    """The route of a collection itself (inspect, delete)."""
    return f"/v1/collections/{path_segment(collection, 'collection')}"


def collection_path(collection: str) -> str:
    """The prefix of a collection's routes (the default collection's are under ``/v1``)."""
    return "/v1" if collection == "default" else collection_resource(collection)


def document_path(collection: str, doc_id: str) -> str:
    return f"{collection_path(collection)}/documents/{path_segment(doc_id, 'doc_id')}"


class ApiCallError(ServeAppError):
    """An error answer of the service (or no answer), in the API's own terms."""

    def __init__(self, code: str, message: str, request_id: str, status: int) -> None:
        super().__init__(f"{message} (request id {request_id})")
        self.code = code
        self.status = status
        self.request_id = request_id

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ServiceClient:
    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        request_prefix: str = "cli",
    ) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.request_prefix = request_prefix
        self._http: httpx.AsyncClient | None = None

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:  # created on the caller's own event loop
            headers = {"X-API-Key": self.api_key} if self.api_key else {}
            self._http = httpx.AsyncClient(
                base_url=self.url, headers=headers, timeout=self.timeout_s + 1
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def new_request_id(self) -> str:
        return f"{self.request_prefix}-{uuid.uuid4().hex[:16]}"

    def _headers(self, request_id: str | None = None) -> tuple[str, dict[str, str]]:
        request_id = request_id or self.new_request_id()
        return request_id, {
            "X-Request-ID": request_id,
            "X-Request-Timeout-Ms": str(int(self.timeout_s * 1000)),
        }

    @contextlib.contextmanager
    def _bounded(self, what: str, request_id: str) -> Iterator[None]:
        """``timeout_s`` on the block; no answer in time or no connection as ApiCallError."""
        try:
            with anyio.fail_after(self.timeout_s):
                yield
        except TimeoutError:
            raise ApiCallError(
                "TIMEOUT",
                f"the service did not finish {what} within {self.timeout_s:g}s",
                request_id,
                504,
            ) from None
        except httpx.HTTPError as error:
            raise ApiCallError(
                "SERVICE_UNAVAILABLE",
                f"cannot reach the service at {self.url}: {error}",
                request_id,
                503,
            ) from None

    async def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        request_id, headers = self._headers()
        with self._bounded(f"{method} {path}", request_id):
            response = await self.http.request(method, path, headers=headers, **kwargs)
        if response.status_code >= 400:
            raise api_error(response, request_id)
        return response.json()

    async def events(
        self, path: str, body: dict[str, Any], request_id: str | None = None
    ) -> AsyncIterator[AnswerEvent]:
        """An answer's Server-Sent Events from ``POST path``, typed, as they arrive; an error
        status raises ApiCallError before the first event."""
        request_id, headers = self._headers(request_id)
        with self._bounded(f"POST {path}", request_id):
            async with self.http.stream("POST", path, json=body, headers=headers) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise api_error(response, request_id)
                kind, data = "message", []
                async for line in response.aiter_lines():
                    if line.startswith("event: "):
                        kind = line.removeprefix("event: ")
                    elif line.startswith("data: "):
                        data.append(line.removeprefix("data: "))
                    elif not line and data:
                        yield parse_event(kind, json.loads("\n".join(data)))
                        kind, data = "message", []


async def read_answer(
    api: ServiceClient, path: str, body: dict[str, Any]
) -> tuple[AnswerMetadata, AnswerDone]:
    """A streamed answer's first and last events; an ``error`` event (or status) as
    ApiCallError with its code, message and the call's request id (the status is the
    stream's: the failure came after its headers)."""
    request_id = api.new_request_id()
    metadata: AnswerMetadata | None = None
    # Closed here, in this task, when it returns early: the stream's time bound (an anyio
    # cancel scope) must be left by the task that entered it, never by a finalizer.
    events = api.events(path, {**body, "stream": True}, request_id)
    async with contextlib.aclosing(events):
        async for event in events:
            if isinstance(event, AnswerMetadata):
                metadata = event
            elif isinstance(event, AnswerError):
                raise ApiCallError(event.code, event.message, request_id, 200)
            elif isinstance(event, AnswerDone) and metadata is not None:
                return metadata, event
    raise ApiCallError("INTERNAL", "the answer ended without done or error", request_id, 200)


def api_error(response: httpx.Response, request_id: str) -> ApiCallError:
    """The API's error envelope as an ``ApiCallError``."""
    try:
        error = response.json()["error"]
        code, message = error["code"], error["message"]
        request_id = error.get("request_id") or request_id
    except (ValueError, KeyError, TypeError):
        code, message = f"HTTP_{response.status_code}", response.text[:300]
    return ApiCallError(code, message, request_id, response.status_code)
