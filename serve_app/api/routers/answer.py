"""Answers with citations, streamed as Server-Sent Events or as one JSON object.
``add_answer_routes`` puts the same handler under ``/v1/answer`` (the tenant's ``default``
collection) and ``/v1/collections/{name}/answer``."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from serve_app.api import deps
from serve_app.api.auth import Principal
from serve_app.api.errors import error_classes, error_response
from serve_app.api.observability import Metrics
from serve_app.errors import ServeAppError
from serve_app.pipelines.answer import CheckedAnswer, Event
from serve_app.schemas import AnswerRequest
from serve_app.service import RetrievalService

DESCRIPTION = (
    "With `stream` true (the default): `text/event-stream` with the events `metadata`, "
    "`delta` (repeated), then `done` or `error`. With `stream` false: one JSON object "
    "holding the metadata and the `done` (or `error`) fields."
)


HEARTBEAT = b": keep-alive\n\n"


def encode(kind: str, data: dict[str, Any], event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def with_heartbeats(
    events: AsyncIterator[Event], every_s: float
) -> AsyncIterator[Event | None]:
    """``events``, with None whenever ``every_s`` passes without one (a heartbeat is due).
    The events are produced by a task of their own, so waiting for the next one never
    cancels it; closing this iterator cancels that task and closes ``events``."""
    queue: asyncio.Queue[Event | None] = asyncio.Queue()

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
                yield None
                continue
            if event is None:
                break
            yield event
        await producing  # its exception, if any, is the response's
    finally:
        producing.cancel()
        await asyncio.gather(producing, return_exceptions=True)


class EventStreamResponse(Response):
    """Server-Sent Events from ``events``: the headers and a ``retry:`` hint at once, an SSE
    comment for each None (a heartbeat), each event with its ``id:``. The client's disconnect
    is watched for while the events are sent: on it, the sending stops and ``events`` is
    closed at once (which closes the generation), instead of when the next write fails or
    the iterator is collected."""

    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncIterator[Event | None],
        retry_ms: int | None = 3000,
        encoder: Callable[[str, dict[str, Any], int], bytes] = encode,
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
                if event is None:
                    await body(HEARTBEAT)
                    continue
                number += 1
                await body(self.encode(*event, number))
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
        if sending.done() and not sending.cancelled() and sending.exception() is not None:
            error = sending.exception()
            if not isinstance(error, OSError):  # a write to a closed connection: disconnect
                raise error


async def run_answer(
    request: AnswerRequest,
    who: Principal,
    seconds: float,
    service: RetrievalService,
    metrics: Metrics,
) -> Response:
    who.require("read")
    checked = await deps.within(
        seconds, service.check_answer(request, who.scope(request.collection))
    )
    if not request.stream:
        answer = await deps.within(seconds, service.answer(checked, seconds))
        metrics.observe_stages("answer", answer.get("timings_ms", {}))
        if answer["error"] is not None:
            return failed_answer(answer)
        return JSONResponse(answer)

    settings = service.config
    return EventStreamResponse(
        with_heartbeats(
            observed_answer(service, checked, seconds, metrics), settings.answer.heartbeat_s
        ),
        retry_ms=round(settings.llm.retry_after_s * 1000),
    )


def failed_answer(answer: dict[str, Any]) -> Response:
    """A JSON answer whose generation failed: the error's own status and envelope (with the
    request id), the results and whatever else was found beside it."""
    error = answer["error"]
    mapped = ServeAppError(error["message"])
    cls = next((c for c in error_classes() if c.code == error["code"]), ServeAppError)
    mapped.code, mapped.status = cls.code, cls.status
    response = error_response(mapped)
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
                "content": {"text/event-stream": {}, "application/json": {}},
            },
            429: {"description": "OVERLOADED: every generation slot is taken (Retry-After)"},
        },
    )
    async def answer_post(
        body: AnswerRequest,
        name: str | None = Depends(collection),
        who: Principal = Depends(deps.principal),
        seconds: float = Depends(deps.answer_deadline_s),
        service: RetrievalService = Depends(deps.service),
        metrics: Metrics = Depends(deps.metrics),
    ) -> Response:
        request = body if name is None else body.model_copy(update={"collection": name})
        return await run_answer(request, who, seconds, service, metrics)


async def observed_answer(
    service: RetrievalService, checked: CheckedAnswer, seconds: float, metrics: Metrics
) -> AsyncIterator[Event]:
    """The answer's events (both doors), its stage timings recorded when it is done."""
    events = service.answer_stream(checked, seconds)
    try:
        async for kind, data in events:
            if kind == "done":
                metrics.observe_stages("answer", data["timings_ms"])
            yield kind, data
    finally:
        await events.aclose()
