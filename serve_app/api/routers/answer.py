"""Answers with citations, streamed as Server-Sent Events or as one JSON object.
``add_answer_routes`` puts the same handler under ``/v1/answer`` (the tenant's ``default``
collection) and ``/v1/collections/{name}/answer``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from serve_app.api import deps
from serve_app.api.auth import Principal
from serve_app.api.observability import Metrics
from serve_app.api.service import RetrievalService
from serve_app.pipelines.answer import Event
from serve_app.schemas import AnswerRequest

DESCRIPTION = (
    "With `stream` true (the default): `text/event-stream` with the events `metadata`, "
    "`delta` (repeated), then `done` or `error`. With `stream` false: one JSON object "
    "holding the metadata and the `done` (or `error`) fields."
)


def encode(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class EventStreamResponse(Response):
    """Server-Sent Events from ``events``. The client's disconnect is watched for while the
    events are sent: on it, the sending stops and ``events`` is closed at once (which closes
    the generation), instead of when the next write fails or the iterator is collected."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[Event]) -> None:
        # Not Response.__init__: that would announce a Content-Length of its empty body.
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def pump() -> None:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for kind, data in self.events:
                await send(
                    {"type": "http.response.body", "body": encode(kind, data), "more_body": True}
                )
            await send({"type": "http.response.body", "body": b"", "more_body": False})

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
    if not request.stream:
        answer = await deps.within(seconds, service.answer(request, who.tenant_id))
        metrics.observe_stages("answer", answer.get("timings_ms", {}))
        return JSONResponse(answer)
    prepared = await deps.within(seconds, service.prepare_answer(request, who.tenant_id))

    async def observed() -> AsyncIterator[Event]:
        events = service.answer_events(prepared)
        try:
            async for kind, data in events:
                if kind == "done":
                    metrics.observe_stages("answer", data["timings_ms"])
                yield kind, data
        finally:
            await events.aclose()

    return EventStreamResponse(observed())


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
