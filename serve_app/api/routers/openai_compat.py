"""The OpenAI-compatible door: ``POST /chat/completions`` and ``GET /models`` over the answer
use case (no second pipeline), so that existing OpenAI clients work unchanged.
``add_openai_routes`` puts them under ``/v1`` (the tenant's ``default`` collection) and
``/v1/collections/{name}`` (a client's ``base_url`` picks the collection).

The last ``user`` message is the question, the earlier ``user``/``assistant`` messages its
history; ``system`` messages are accepted and not used (the service's own prompt governs).
Auth, tenant, deadlines, the prompt budget and every refusal are those of ``/v1/answer``;
errors come in OpenAI's shape (``message``, ``type``, ``param``, ``code``: our stable code)
beside our ``request_id``. The passages and citations ride in the extension field
``serve_app``: on the first chunk (``results``) and on the last (citations, usage, timings)
of a stream, together on a whole completion."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from fastapi import APIRouter, Body, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import Response

from serve_app.api import deps
from serve_app.api.auth import Principal
from serve_app.api.errors import error_response, reported_error
from serve_app.api.models import ErrorDetail
from serve_app.api.observability import REQUEST_ID, Metrics
from serve_app.api.routers.answer import event_stream, observed_answer
from serve_app.errors import RequestSchemaError, ServeAppError, describe_validation_errors
from serve_app.pipelines.answer_events import (
    AnswerDelta,
    AnswerDone,
    AnswerError,
    AnswerEvent,
    AnswerMetadata,
)
from serve_app.schemas import AnswerOptions, AnswerRequest, CollectionName
from serve_app.service import RetrievalService

DONE = b"data: [DONE]\n\n"
# Validated in the handler, so that a bad body is an error in OpenAI's shape too.
CHAT_BODY = Body(description="OpenAI's chat completion request, plus /v1/answer's fields")
OWNER = "serve-app"


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = OWNER


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class OpenAIErrorDetail(ErrorDetail):
    """Our error detail with OpenAI's ``type`` and ``param`` beside it; an error raised
    before the handler runs (authentication, the path) comes without them."""

    type: str | None = None
    param: str | None = None


class OpenAIErrorEnvelope(BaseModel):
    """What ``/chat/completions`` answers an error with (``serve_app.api.app`` publishes it
    for the route's error statuses)."""

    model_config = ConfigDict(extra="forbid")
    error: OpenAIErrorDetail


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant"]
    content: str = Field(max_length=20_000)


class ChatCompletionRequest(AnswerOptions):
    """OpenAI's chat completion body; the fields this service does not honour (sampling,
    ``n`` above 1 refused, tools) are ignored so that existing clients work. The extension
    fields are ``/v1/answer``'s (``AnswerOptions`` and ``collection``; an OpenAI client sends
    them in ``extra_body``); ``max_tokens`` is both OpenAI's and ours."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=256)
    messages: list[ChatMessage] = Field(min_length=1, max_length=65)
    stream: bool = False
    max_completion_tokens: int | None = Field(default=None, ge=1, le=8192)
    n: Literal[1] | None = None
    collection: CollectionName | None = None

    def answer_request(self, collection: str | None) -> AnswerRequest:
        """``/v1/answer``'s request; RequestSchemaError (422) without a last user message."""
        turns = [m for m in self.messages if m.role in ("user", "assistant")]
        if not turns or turns[-1].role != "user":
            raise RequestSchemaError("messages: the last user or assistant message must be user")
        options = {
            name: getattr(self, name)
            for name in AnswerOptions.model_fields
            if getattr(self, name) is not None
        }
        named = collection or self.collection
        return AnswerRequest.model_validate(
            {
                **options,
                **({"collection": named} if named else {}),
                "question": turns[-1].content,
                "messages": [t.model_dump() for t in turns[:-1]],
                "max_tokens": self.max_completion_tokens or self.max_tokens,
                "stream": self.stream,
            }
        )


def openai_error(error: ServeAppError) -> JSONResponse:
    """Our envelope in OpenAI's error shape: ``type`` and ``param`` added, ``code`` ours."""
    response = error_response(error)
    body = json.loads(bytes(response.body))
    kind = "invalid_request_error" if error.status < 500 else "server_error"
    if error.status in (401, 403):
        kind = "authentication_error" if error.status == 401 else "permission_error"
    elif error.status == 429:
        kind = "rate_limit_error"
    body["error"].update(type=kind, param=None)
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
    return JSONResponse(body, status_code=response.status_code, headers=headers)


def _usage(done: dict[str, Any]) -> dict[str, int]:
    usage = done.get("usage") or {"prompt_tokens": 0, "completion_tokens": 0}
    total = usage["prompt_tokens"] + usage["completion_tokens"]
    return {**usage, "total_tokens": total}


def _citations(done: dict[str, Any]) -> dict[str, Any]:
    keep = ("citations", "invalid_citations", "uncited_sentences", "early_return", "timings_ms")
    return {k: done[k] for k in keep if k in done}


class Completion:
    """The OpenAI objects of one answer: a shared id, creation time and model."""

    def __init__(self, model: str) -> None:
        request_id = REQUEST_ID.get()
        self.id = f"chatcmpl-{request_id}"  # the X-Request-ID the logs carry
        self.created = int(time.time())
        self.model = model

    def _head(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def whole(self, answer: dict[str, Any]) -> dict[str, Any]:
        extension = {"results": answer.get("results", []), **_citations(answer)}
        return {
            **self._head("chat.completion"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer["answer"]},
                    "finish_reason": answer.get("finish_reason") or "stop",
                }
            ],
            "usage": _usage(answer),
            "serve_app": extension,
        }

    def chunk(
        self,
        delta: dict[str, Any],
        finish_reason: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return {**self._head("chat.completion.chunk"), "choices": [choice], **extra}

    async def chunks(self, events: AsyncIterator[AnswerEvent]) -> AsyncIterator[dict[str, Any]]:
        """The answer's events as ``chat.completion.chunk`` objects (an ``error`` event as
        OpenAI's in-stream error object)."""
        try:
            async for event in events:
                if isinstance(event, AnswerMetadata):
                    extension = {"results": event.data()["results"]}
                    delta = {"role": "assistant", "content": ""}
                    yield self.chunk(delta, serve_app=extension)
                elif isinstance(event, AnswerDelta):
                    yield self.chunk({"content": event.text})
                elif isinstance(event, AnswerDone):
                    data = event.data()
                    finish = event.finish_reason or "stop"
                    yield self.chunk({}, finish, usage=_usage(data), serve_app=_citations(data))
                elif isinstance(event, AnswerError):
                    error = reported_error(event.code, event.message)
                    yield json.loads(bytes(openai_error(error).body))
        finally:
            await events.aclose()  # type: ignore[attr-defined]


def encode_chunk(chunk: dict[str, Any], event_id: int | None = None) -> bytes:
    """A chunk as OpenAI streams it: one ``data:`` line, no event name or id."""
    del event_id
    return f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()


async def run_chat_completion(
    body: dict[str, Any],
    collection: str | None,
    who: Principal,
    seconds: float,
    service: RetrievalService,
    metrics: Metrics,
) -> Response:
    try:
        who.require("read")
        try:
            chat = ChatCompletionRequest.model_validate(body)
            request = chat.answer_request(collection)
        except ValidationError as invalid:
            raise RequestSchemaError(describe_validation_errors(list(invalid.errors()))) from None
        checked = await deps.within(
            seconds, service.check_answer(request, who.scope(request.collection))
        )
    except ServeAppError as error:
        return openai_error(error)
    completion = Completion(service.llm.model_id if service.llm else OWNER)
    if not request.stream:
        try:
            answer = await deps.within(seconds, service.answer(checked, seconds))
        except ServeAppError as error:
            return openai_error(error)
        metrics.observe_stages("answer", answer.get("timings_ms", {}))
        if answer["error"] is not None:
            failed = answer["error"]
            return openai_error(reported_error(failed["code"], failed["message"]))
        return JSONResponse(completion.whole(answer))

    return event_stream(
        completion.chunks(observed_answer(service, checked, seconds, metrics)),
        service.config,
        encode_chunk,
        retry=False,  # OpenAI's clients read a lone ``retry:`` as an empty chunk
        end=DONE,
    )


def add_openai_routes(router: APIRouter, collection: Callable[..., Any]) -> None:
    """``/chat/completions`` and ``/models`` under ``router``, for the collection that
    ``collection`` names (None: the body's ``collection``, else ``default``)."""

    @router.post(
        "/chat/completions",
        response_class=Response,
        responses={
            200: {
                "description": "a `chat.completion`, or with `stream` `chat.completion.chunk` "
                "Server-Sent Events ending `data: [DONE]`",
                "content": {"application/json": {}, "text/event-stream": {}},
            },
        },
    )
    async def chat_completions(
        body: dict[str, Any] = CHAT_BODY,
        name: str | None = Depends(collection),
        who: Principal = Depends(deps.principal),
        seconds: float = Depends(deps.answer_deadline_s),
        service: RetrievalService = Depends(deps.service),
        metrics: Metrics = Depends(deps.metrics),
    ) -> Response:
        return await run_chat_completion(body, name, who, seconds, service, metrics)

    @router.get("/models", response_model=ModelList)
    async def models(
        name: str | None = Depends(collection),
        who: Principal = Depends(deps.principal),
        service: RetrievalService = Depends(deps.service),
    ) -> ModelList:
        """The model answers come from (none without an LLM)."""
        del name
        who.require("read")
        llm = service.llm
        return ModelList(data=[ModelCard(id=llm.model_id)] if llm is not None else [])
