"""A running service's HTTP API as one typed client: what ``serve-app --url`` commands, the MCP
server and the local launcher's folder ingest call instead of opening the index themselves.

``ServiceClient`` has the service's verbs (search, ingest, upload, documents, collections,
answers, inspect), each returning the API's own response model; every route and request
body a door sends is built here and nowhere else. One bounded request at a time per call;
each sends its own ``X-Request-ID`` and ``X-Request-Timeout-Ms`` (so the service gives up
too). An API error comes back as ``ApiCallError`` with the API's code, message and request
id."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import anyio
import httpx
from pydantic import BaseModel

from serve_app.errors import InvalidInputError, ServeAppError
from serve_app.pipelines.answer_events import (
    AnswerDone,
    AnswerError,
    AnswerEvent,
    AnswerMetadata,
    parse_event,
)
from serve_app.schemas import DEFAULT_COLLECTION, AnswerRequest, SearchRequest

if TYPE_CHECKING:
    from serve_app.api.models import (
        CollectionDeleted,
        CollectionDetail,
        CollectionList,
        CollectionOut,
        DeleteResponse,
        DocumentIn,
        IngestResponse,
        SearchResponseOut,
    )
    from serve_app.schemas import DocumentInfo, DocumentPage

M = TypeVar("M", bound=BaseModel)


def read(model: type[M], answer: Any) -> M:
    """An answer as ``model``, ignoring fields this client does not know: the service's
    models refuse extra fields in requests, but a newer service may answer with more than
    an older client reads, and that must not break the client."""
    return model.model_validate(answer, extra="ignore")


FileUpload = tuple[str, bytes]
"""A file as uploaded: its name (the loader picks by its suffix) and its bytes."""
RETRIED_STATUSES = (429, 503)  # the service says when to come back (Retry-After)


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

    def __init__(
        self,
        code: str,
        message: str,
        request_id: str,
        status: int,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(f"{message} (request id {request_id})")
        self.code = code
        self.status = status
        self.request_id = request_id
        self.retry_after_s = retry_after_s

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ServiceClient:
    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        request_prefix: str = "cli",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``transport``: httpx's, for a service reached other than over the network (an
        ASGI app in this process, a test's)."""
        self.url = url.rstrip("/")
        self.transport = transport
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.request_prefix = request_prefix
        self._http: httpx.AsyncClient | None = None

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:  # created on the caller's own event loop
            headers = {"X-API-Key": self.api_key} if self.api_key else {}
            self._http = httpx.AsyncClient(
                base_url=self.url,
                headers=headers,
                timeout=self.timeout_s + 1,
                transport=self.transport,
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
        answer: dict[str, Any] = response.json()
        return answer

    async def events(
        self, path: str, body: dict[str, Any], request_id: str | None = None
    ) -> AsyncGenerator[AnswerEvent, None]:
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

    # --- the service's verbs: each route and body is built here, once ----------------------

    async def collections(self) -> CollectionList:
        from serve_app.api.models import CollectionList

        return read(CollectionList, await self.call("GET", "/v1/collections"))

    async def create_collection(self, name: str) -> CollectionOut:
        from serve_app.api.models import CollectionOut

        body = {"name": name}
        return read(CollectionOut, await self.call("POST", "/v1/collections", json=body))

    async def describe_collection(self, name: str) -> CollectionDetail:
        from serve_app.api.models import CollectionDetail

        answer = await self.call("GET", collection_resource(name))
        return read(CollectionDetail, answer)

    async def delete_collection(self, name: str) -> CollectionDeleted:
        from serve_app.api.models import CollectionDeleted

        answer = await self.call("DELETE", collection_resource(name))
        return read(CollectionDeleted, answer)

    async def document(self, doc_id: str, collection: str = DEFAULT_COLLECTION) -> DocumentInfo:
        from serve_app.schemas import DocumentInfo

        answer = await self.call("GET", document_path(collection, doc_id))
        return read(DocumentInfo, answer)

    async def documents(
        self, collection: str = DEFAULT_COLLECTION, cursor: str | None = None, limit: int = 100
    ) -> DocumentPage:
        """One page of the collection's documents; pass its ``next_cursor`` for the next."""
        from serve_app.schemas import DocumentPage

        params: dict[str, str | int] = {"limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        path = f"{collection_path(collection)}/documents"
        return read(DocumentPage, await self.call("GET", path, params=params))

    async def delete_document(
        self, doc_id: str, collection: str = DEFAULT_COLLECTION
    ) -> DeleteResponse:
        from serve_app.api.models import DeleteResponse

        answer = await self.call("DELETE", document_path(collection, doc_id))
        return read(DeleteResponse, answer)

    async def search(self, request: SearchRequest) -> SearchResponseOut:
        """``request`` in its collection (``request.collection``)."""
        from serve_app.api.models import SearchResponseOut

        path = f"{collection_path(request.collection)}/search"
        answer = await self.call("POST", path, json=_body(request))
        return read(SearchResponseOut, answer)

    async def ingest(
        self, documents: Sequence[DocumentIn], collection: str = DEFAULT_COLLECTION
    ) -> IngestResponse:
        """Documents given as data (JSON)."""
        from serve_app.api.models import IngestResponse

        body = {"documents": [d.model_dump(exclude_none=True) for d in documents]}
        answer = await self._retried("POST", _documents(collection), json=body)
        return read(IngestResponse, answer)

    async def upload(
        self, files: Sequence[FileUpload], collection: str = DEFAULT_COLLECTION
    ) -> IngestResponse:
        """Files as the service loads them (multipart ``files``), in one request."""
        from serve_app.api.models import IngestResponse

        parts = [("files", (name, content, "application/octet-stream")) for name, content in files]
        answer = await self._retried("POST", _documents(collection), files=parts)
        return read(IngestResponse, answer)

    async def upload_paths(
        self,
        paths: Sequence[Path],
        collection: str = DEFAULT_COLLECTION,
        batch_files: int = 16,
        keep_going: bool = False,
        on_batch: Callable[[list[Path], IngestResponse | ApiCallError], None] | None = None,
        stopped: Callable[[], bool] = lambda: False,
    ) -> UploadTotals:
        """``paths`` uploaded ``batch_files`` a request (each retried after the service's
        429 or 503, as its Retry-After says), ``on_batch`` told of each batch's outcome. A
        refused batch raises its ApiCallError, or with ``keep_going`` is counted and the next
        one sent; ``stopped`` ends the loop between batches."""
        totals = UploadTotals(files=len(paths))
        for start in range(0, len(paths), batch_files):
            if stopped():
                break
            group = list(paths[start : start + batch_files])
            try:
                answer = await self.upload([(p.name, p.read_bytes()) for p in group], collection)
            except ApiCallError as error:
                if not keep_going:
                    raise
                totals.failed_files += len(group)
                if on_batch is not None:
                    on_batch(group, error)
                continue
            totals.add(answer)
            if on_batch is not None:
                on_batch(group, answer)
        return totals

    def answer_events(
        self, request: AnswerRequest, request_id: str | None = None
    ) -> AsyncGenerator[AnswerEvent, None]:
        """``request``'s answer as typed Server-Sent Events, in its collection."""
        body = {**_body(request), "stream": True}
        return self.events(f"{collection_path(request.collection)}/answer", body, request_id)

    async def answer(self, request: AnswerRequest) -> tuple[AnswerMetadata, AnswerDone]:
        """The streamed answer's first and last events (``read_answer``)."""
        return await read_answer(self, request)

    async def answer_json(self, request: AnswerRequest) -> dict[str, Any]:
        """The answer as one JSON object (``"stream": false``)."""
        body = {**_body(request), "stream": False}
        return await self.call("POST", f"{collection_path(request.collection)}/answer", json=body)

    async def inspect(
        self, tenant: str | None = None, collection: str | None = None
    ) -> dict[str, Any]:
        """What the stores hold (admin scope): every tenant's, one tenant's or one
        collection's."""
        query = {k: v for k, v in (("tenant", tenant), ("collection", collection)) if v}
        return await self.call("GET", "/v1/admin/inspect", params=query)

    async def _retried(self, method: str, path: str, tries: int = 20, **kwargs: Any) -> Any:
        """``call``, sent again after a 429 or 503 once its Retry-After (at most 60 s) has
        passed: an upload past the tenant's byte rate or the pending-upload bound waits its
        turn instead of failing."""
        for attempt in range(tries):
            try:
                return await self.call(method, path, **kwargs)
            except ApiCallError as error:
                if error.status not in RETRIED_STATUSES or attempt == tries - 1:
                    raise
                await asyncio.sleep(min(60.0, error.retry_after_s or 1.0))
        raise AssertionError("unreachable")


@dataclass
class UploadTotals:
    files: int
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    chunks_written: int = 0
    failed_files: int = 0

    def add(self, answer: IngestResponse) -> None:
        self.written += answer.written
        self.unchanged += answer.unchanged
        self.chunks_written += answer.chunks_written


def _body(request: SearchRequest | AnswerRequest) -> dict[str, Any]:
    """A request's JSON body; its collection is in the route instead."""
    return request.model_dump(mode="json", exclude_none=True, exclude={"collection"})


def _documents(collection: str) -> str:
    return f"{collection_path(collection)}/documents"


async def read_answer(
    api: ServiceClient, request: AnswerRequest
) -> tuple[AnswerMetadata, AnswerDone]:
    """A streamed answer's first and last events; an ``error`` event (or status) as
    ApiCallError with its code, message and the call's request id (the status is the
    stream's: the failure came after its headers)."""
    request_id = api.new_request_id()
    metadata: AnswerMetadata | None = None
    # Closed here, in this task, when it returns early: the stream's time bound (an anyio
    # cancel scope) must be left by the task that entered it, never by a finalizer.
    events = api.answer_events(request, request_id)
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
    retry = response.headers.get("retry-after")
    try:
        retry_after_s = float(retry) if retry is not None else None
    except ValueError:
        retry_after_s = None
    return ApiCallError(code, message, request_id, response.status_code, retry_after_s)
