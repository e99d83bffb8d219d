"""Answers with citations, streamed as Server-Sent Events or as one JSON object.
``add_answer_routes`` puts the same handler under ``/v1/answer`` (the tenant's ``default``
collection) and ``/v1/collections/{name}/answer``."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Generic, TypeVar

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from serve_app.api import deps
from serve_app.api.auth import Principal
from serve_app.api.errors import error_response, reported_error
from serve_app.api.observability import CLIENT_CLOSED, Metrics, Stopwatch
from serve_app.api.replays import Replays
from serve_app.config import AppConfig
from serve_app.pipelines.answer import CheckedAnswer
from serve_app.pipelines.answer_events import (
    AnswerDelta,
    AnswerDone,
    AnswerError,
    AnswerEvent,
    AnswerMetadata,
    Heartbeat,
)
from serve_app.schemas import AnswerRequest
from serve_app.service import RetrievalService

DESCRIPTION = (
    "With `stream` true (the default): `text/event-stream` with the events `metadata`, "
    "`delta` (repeated), then `done` or `error` (the SSE `event:` line names the event, "
    "its `data:` is the body of the `AnswerEvent` schema of that name, `event` itself "
    "aside), and `: keep-alive` comments while the answer is silent. With `stream` false: "
    "one JSON object holding the metadata and the `done` (or `error`) fields."
)


EVENT_SCHEMA_REF = "#/components/schemas/AnswerStreamEvent"  # added by serve_app.api.app
HEARTBEAT = b": keep-alive\n\n"
T = TypeVar("T")


def encode(event: AnswerEvent, event_id: int | str | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    data = json.dumps(event.data(), separators=(",", ":"))
    return f"{head}event: {event.event}\ndata: {data}\n\n".encode()


async def with_heartbeats(events: AsyncIterator[T], every_s: float) -> AsyncIterator[T | Heartbeat]:
    """``events``, with a ``Heartbeat`` whenever ``every_s`` passes without one. The events
    are produced by a task of their own, so waiting for the next one never cancels it;
    closing this iterator cancels that task and closes ``events``."""
    queue: asyncio.Queue[T | None] = asyncio.Queue()

    async def produce() -> None:
        try:
            async for event in events:
                await queue.put(event)
        finally:
            await events.aclose()  # type: ignore[attr-defined]
            await queue.put(None)

    producing = asyncio.ensure_future(produce())
    try:
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), every_s)
            except TimeoutError:
                yield Heartbeat()
                continue
            if event is None:
                break
            yield event
        await producing  # its exception, if any, is the response's
    finally:
        producing.cancel()
        await asyncio.gather(producing, return_exceptions=True)


class EventStreamResponse(Response, Generic[T]):
    """Server-Sent Events from ``events``: the headers and a ``retry:`` hint at once, an SSE
    comment for each ``Heartbeat``, each event as ``encoder`` writes it (with its number).
    The client's disconnect is watched for while the events are sent: on it, the sending
    stops and ``events`` is closed at once (which closes the generation), instead of when the
    next write fails or the iterator is collected."""

    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncIterator[T | Heartbeat],
        encoder: Callable[[T, int], bytes],
        retry_ms: int | None = 3000,
        end: bytes = b"",
    ) -> None:
        # Not Response.__init__: that would announce a Content-Length of its empty body.
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.events = events
        self.retry_ms = retry_ms
        self.encode = encoder
        self.end = end  # written after the last event (OpenAI's ``data: [DONE]``)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def body(chunk: bytes) -> None:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

        async def pump() -> None:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            if self.retry_ms is not None:
                await body(f"retry: {self.retry_ms}\n\n".encode())
            number = 0
            async for event in self.events:
                if isinstance(event, Heartbeat):
                    await body(HEARTBEAT)
                    continue
                number += 1
                await body(self.encode(event, number))
            await send({"type": "http.response.body", "body": self.end, "more_body": False})

        async def disconnected() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        sending = asyncio.ensure_future(pump())
        watching = asyncio.ensure_future(disconnected())
        try:
            await asyncio.wait({sending, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sending, watching):
                task.cancel()
            await asyncio.gather(sending, watching, return_exceptions=True)
            await self.events.aclose()  # type: ignore[attr-defined]
        error = None if sending.cancelled() or not sending.done() else sending.exception()
        if error is not None and not isinstance(error, OSError):  # OSError: a disconnect
            raise error


async def run_answer(
    request: AnswerRequest,
    who: Principal,
    seconds: float,
    service: RetrievalService,
    metrics: Metrics,
    receive: Receive,
    replays: Replays | None = None,
    last_event_id: str | None = None,
) -> Response:
    """An answer (``replays``: where streamed answers are kept for a reconnect, and
    ``last_event_id`` a reconnect's header; serve_app/api/replays.py)."""
    who.require("read")
    config = service.config
    owner = f"{who.tenant_id}/{who.subject}"
    resumable = replays is not None and request.stream and config.answer.resume_s > 0
    if resumable and last_event_id:
        assert replays is not None
        recording, after = replays.find(last_event_id, owner, request.model_dump(mode="json"))
        return event_stream(
            replays.follow(recording, after, config.answer.heartbeat_s), config, _sent
        )
    checked = await deps.within(
        seconds, service.check_answer(request, who.scope(request.collection))
    )
    if not request.stream:
        watch = Stopwatch()
        answer = await deps.within(
            seconds, deps.unless_client_leaves(receive, service.answer(checked, seconds))
        )
        observe_whole_answer(answer, watch.seconds(), metrics)
        if answer["error"] is not None:
            return failed_answer(answer)
        return JSONResponse(answer)

    observed = observed_answer(service, checked, seconds, metrics)
    events = await held(observed, config, metrics, receive)
    if isinstance(events, AnswerError):
        return error_response(reported_error(events.code, events.message, events.retry_after_s))
    if not resumable:
        stream: EventStreamResponse[AnswerEvent] = event_stream(events, config, encode)
        return stream
    assert replays is not None
    recording = replays.start(owner, request.model_dump(mode="json"), events, encode)
    return event_stream(replays.follow(recording, 0, config.answer.heartbeat_s), config, _sent)


def _sent(data: bytes, _: int) -> bytes:
    """A recorded event, already encoded with its id."""
    return data


async def held(
    events: AsyncIterator[AnswerEvent], config: AppConfig, metrics: Metrics, receive: Receive
) -> AnswerError | AsyncIterator[AnswerEvent | Heartbeat]:
    """The answer's events with heartbeats, or its refusal: the response's headers wait for
    the first event up to ``answer.heartbeat_s`` (what proxies are sized to wait for a byte),
    so a refusal decided before any result (an LLM replica's overload through Serve, the
    exact prompt budget, a retrieval timeout: a first ``error`` event) is answered with its
    own status (429 with Retry-After, 422, 504) and clients' retry logic runs. A client
    that hangs up meanwhile stops the answer (``ClientDisconnect``)."""
    beating = with_heartbeats(events, config.answer.heartbeat_s)
    try:
        first = await deps.unless_client_leaves(receive, anext(beating, None))
    except BaseException:  # cancelled (the client left): the answer stops here
        await beating.aclose()  # type: ignore[attr-defined]
        raise
    if isinstance(first, AnswerError):
        await beating.aclose()  # type: ignore[attr-defined]
        return first

    async def resumed() -> AsyncIterator[AnswerEvent | Heartbeat]:
        try:
            if first is not None:
                yield first
            async for event in beating:
                if isinstance(event, AnswerError):  # after the 200: the HTTP layer saw none
                    metrics.observe_streamed_error(event.code)
                yield event
        finally:
            await beating.aclose()  # type: ignore[attr-defined]

    return resumed()


def event_stream(
    events: AsyncIterator[T | Heartbeat],
    config: AppConfig,
    encoder: Callable[[T, int], bytes],
    retry: bool = True,
    end: bytes = b"",
) -> EventStreamResponse[T]:
    """An answer's SSE response (both doors) of ``held`` events: a ``retry:`` hint of
    ``llm.retry_after_s`` unless ``retry`` is false, ``end`` after the last event."""
    return EventStreamResponse(
        events,
        encoder,
        retry_ms=round(config.llm.retry_after_s * 1000) if retry else None,
        end=end,
    )


def failed_answer(answer: dict[str, Any]) -> Response:
    """A JSON answer whose generation failed: the error's own status and envelope (with the
    request id), the results and whatever else was found beside it."""
    error = answer["error"]
    failed = reported_error(error["code"], error["message"], error.get("retry_after_s"))
    response = error_response(failed)
    body = json.loads(bytes(response.body))
    body["error"].update({k: v for k, v in error.items() if k not in body["error"]})
    headers = {}
    if "retry_after_s" in error:
        headers["Retry-After"] = str(max(1, math.ceil(error["retry_after_s"])))
    return JSONResponse({**answer, **body}, status_code=response.status_code, headers=headers)


def add_answer_routes(router: APIRouter, collection: Callable[..., Any]) -> None:
    """The answer operation under ``router``, for the collection ``collection`` names; a
    body's own ``collection`` field is honoured on the default route only."""

    @router.post(
        "/answer",
        response_class=Response,
        responses={
            200: {
                "description": DESCRIPTION,
                "content": {
                    "text/event-stream": {"schema": {"$ref": EVENT_SCHEMA_REF}},
                    "application/json": {},
                },
            },
            429: {"description": "OVERLOADED: every generation slot is taken (Retry-After)"},
        },
    )
    async def answer_post(
        http: Request,
        body: AnswerRequest,
        last_event_id: str | None = Header(default=None, max_length=64),
        name: str | None = Depends(collection),
        who: Principal = Depends(deps.principal),
        seconds: float = Depends(deps.answer_deadline_s),
        service: RetrievalService = Depends(deps.service),
        metrics: Metrics = Depends(deps.metrics),
    ) -> Response:
        request = body if name is None else body.model_copy(update={"collection": name})
        return await run_answer(
            request, who, seconds, service, metrics, http.receive,
            getattr(http.app.state, "replays", None), last_event_id,
        )  # fmt: skip


async def observed_answer(
    service: RetrievalService,
    checked: CheckedAnswer,
    seconds: float,
    metrics: Metrics,
) -> AsyncGenerator[AnswerEvent, None]:
    """The answer's events (both doors), its stage timings and outcome recorded when it is
    done."""
    events = service.answer_stream(checked, seconds)
    watch = Stopwatch()
    outcome, data, first_token_s = CLIENT_CLOSED, {}, None
    try:
        async for event in events:
            if isinstance(event, AnswerMetadata):
                data.update(event.data())
            elif isinstance(event, AnswerDelta) and first_token_s is None:
                first_token_s = watch.seconds()
            elif isinstance(event, AnswerDone):
                metrics.observe_stages("answer", event.timings_ms)
                data.update(event.data())
                outcome = event.early_return or "answered"
            elif isinstance(event, AnswerError):
                outcome = event.code
            yield event
    finally:
        await events.aclose()
        metrics.observe_answer(outcome, True, watch.seconds(), data, first_token_s)


def observe_whole_answer(answer: dict[str, Any], seconds: float, metrics: Metrics) -> None:
    """A non-streamed answer's stage timings and outcome (``service.answer``'s object)."""
    metrics.observe_stages("answer", answer.get("timings_ms", {}))
    error = answer.get("error")
    outcome = error["code"] if error else answer.get("early_return") or "answered"
    metrics.observe_answer(outcome, False, seconds, answer)
