"""The OpenAI-compatible door: ``POST /chat/completions`` and ``GET /models`` over the answer
use case (no second pipeline), so that existing OpenAI clients work unchanged.
``add_openai_routes`` puts them under ``/v1`` and ``/v1/collections/{name}``.

Each of the tenant's collections is a model: ``model`` picks the collection (the LLM's own id
means the one the URL names, else ``default``). The messages are read as the clients send
them (``ChatCompletionRequest.conversation``: content parts, ``null`` content, tool results,
any number of turns, the client's ``system``/``developer`` messages as instructions under the
service's own); sampling fields are honoured and what cannot be honoured (``tools``,
``response_format`` other than text, ``logprobs``, ``n`` > 1, images) is a 400 naming its
``param``. Auth, tenant, deadlines, the prompt budget and every refusal are those of
``/v1/answer``; errors come in OpenAI's shape (``message``, ``type``, ``param``, ``code``: our
stable code, or OpenAI's where it has one such as ``context_length_exceeded``) beside our
``request_id``. The passages and citations ride in the extension field ``serve_app``: on the
first chunk (``results``) and on the last (citations, usage, timings) of a stream, together on
a whole completion; this service's own request fields come in ``serve_app`` too."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from fastapi import APIRouter, Body, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.responses import Response
from starlette.types import Receive

from serve_app.api import deps
from serve_app.api.auth import Principal
from serve_app.api.errors import error_response, reported_error
from serve_app.api.models import ErrorDetail
from serve_app.api.observability import REQUEST_ID, Metrics, Stopwatch
from serve_app.api.routers.answer import (
    event_stream,
    held,
    observe_whole_answer,
    observed_answer,
)
from serve_app.errors import (
    InvalidInputError,
    NotFoundError,
    RequestSchemaError,
    ServeAppError,
    UnsupportedParameterError,
    describe_validation_errors,
)
from serve_app.pipelines.answer_events import (
    AnswerDelta,
    AnswerDone,
    AnswerError,
    AnswerEvent,
    AnswerMetadata,
    Heartbeat,
)
from serve_app.schemas import (
    HISTORY_TURNS,
    QUESTION_CHARS,
    AnswerOptions,
    AnswerRequest,
    CollectionName,
    FusionSpec,
    Sampling,
    SearchFilters,
    Strategy,
)
from serve_app.service import RetrievalService

DONE = b"data: [DONE]\n\n"
# Validated in the handler, so that a bad body is an error in OpenAI's shape too.
CHAT_BODY = Body(description="OpenAI's chat completion request, plus /v1/answer's fields")
OWNER = "serve-app"

log = logging.getLogger("serve_app.api")


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
    """One message as OpenAI's clients send it: ``content`` a string, ``null`` (an assistant
    turn that only called tools) or a list of parts; fields such as ``name``, ``tool_calls``
    and ``tool_call_id`` are read by no rule here and ignored."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None

    def text(self, index: int) -> str:
        """The message's text: a string as is, the text parts of a list joined by newlines
        (``refusal`` parts dropped); UnsupportedParameterError naming the part for any other
        kind of part (an image, audio, a file: this door answers from text)."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        texts = []
        for number, part in enumerate(self.content):
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind != "refusal":
                raise UnsupportedParameterError(
                    f"messages[{index}].content[{number}]: a {kind!r} part; this service "
                    "answers from text parts only",
                    f"messages[{index}].content[{number}]",
                )
        return "\n".join(texts)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class ServeAppOptions(AnswerOptions):
    """This service's own request fields, sent by an OpenAI client in ``extra_body`` under
    ``serve_app`` (``top_k``: passages; the top-level ``top_k`` is the sampling one)."""

    model_config = ConfigDict(extra="forbid")

    collection: CollectionName | None = None


# Request fields of OpenAI's API that this door cannot honour, and when a value asks for them
# (a present field that asks for nothing, such as `tool_choice: "none"`, is accepted).
UNSUPPORTED: dict[str, Callable[[Any], bool]] = {
    "tools": bool,
    "functions": bool,
    "tool_choice": lambda v: v not in (None, "none"),
    "function_call": lambda v: v not in (None, "none"),
    "response_format": lambda v: isinstance(v, dict) and v.get("type") not in (None, "text"),
    "logprobs": bool,
    "top_logprobs": lambda v: v is not None,
    "logit_bias": bool,
    "n": lambda v: v not in (None, 1),
    "audio": lambda v: v is not None,
    "modalities": lambda v: v not in (None, ["text"]),
}


# Fields OpenAI's API has that change nothing here (the caller's id, storage, metadata,
# reasoning effort, and the like) are ignored like any other unknown field; which ones a
# request carried is logged (names only, bounded), as vLLM's server does.
IGNORED_NAMES_LOGGED = 16


def log_ignored(body: dict[str, Any]) -> None:
    known = ChatCompletionRequest.model_fields.keys() | UNSUPPORTED.keys()
    ignored = [name for name in body if name not in known]
    if ignored:
        shown = ", ".join(repr(name[:64]) for name in ignored[:IGNORED_NAMES_LOGGED])
        more = len(ignored) - IGNORED_NAMES_LOGGED
        log.info(
            "chat completion fields ignored: %s%s", shown, f" and {more} more" if more > 0 else ""
        )


def refuse_unsupported(body: dict[str, Any]) -> None:
    """UnsupportedParameterError (400, naming the field) for a field that asks for what
    this door cannot do; other fields it does not know are ignored, as OpenAI's own
    clients add new ones often."""
    for name, asks in UNSUPPORTED.items():
        if asks(body.get(name)):
            raise UnsupportedParameterError(
                f"{name} is not supported: this service answers from its documents, in text, "
                "one choice at a time",
                name,
            )


class ChatCompletionRequest(BaseModel):
    """OpenAI's chat completion body as its clients send it. Sampling fields are honoured
    (``temperature``, ``top_p``, ``top_k``, the penalties, ``stop``, ``seed``), ``max_tokens``
    or ``max_completion_tokens`` bound the answer, ``stream_options.include_usage`` adds the
    usage chunk; ``UNSUPPORTED`` fields are refused by name (400); ``model`` names the
    collection (``GET /models``). This service's own fields come under ``serve_app``; the
    older top-level ``collection``, ``filters``, ``strategies``, ``fusion``, ``rerank``,
    ``understand`` and ``multi_query`` are still read."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=256)
    messages: list[ChatMessage] = Field(min_length=1, max_length=4096)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=8192)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=8192)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    serve_app: ServeAppOptions | None = None
    # Read before ``serve_app`` existed; kept so that those clients keep working.
    collection: CollectionName | None = None
    understand: bool | None = None
    multi_query: bool | None = None
    strategies: list[Strategy] | None = None
    fusion: FusionSpec | None = None
    rerank: bool | None = None
    filters: SearchFilters | None = None

    def sampling(self) -> Sampling | None:
        fields = ("temperature", "top_p", "top_k", "presence_penalty", "frequency_penalty")
        given = {f: getattr(self, f) for f in fields if getattr(self, f) is not None}
        if self.stop is not None:
            given["stop"] = [self.stop] if isinstance(self.stop, str) else self.stop
        if self.seed is not None:
            given["seed"] = self.seed
        return Sampling.model_validate(given) if given else None

    def conversation(self) -> tuple[str, list[dict[str, str]], str | None]:
        """(the question, its earlier turns, the client's instructions) by the door's rule:
        the last message must be the user's (its text is the question); earlier user and
        assistant turns with text are the history, newest kept (oldest dropped first, as the
        prompt's budget drops them); ``system`` and ``developer`` messages are instructions
        under the service's own; ``tool`` and ``function`` results are not passages (an
        answer rests only on the collection's documents) and are left out."""
        texts = [(m.role, m.text(i)) for i, m in enumerate(self.messages)]
        last = len(texts) - 1
        role, question = texts[last]
        if role != "user" or not question.strip():
            raise InvalidInputError(
                f"messages[{last}]: the last message must be the user's, with text",
                f"messages[{last}]",
            )
        turns: list[dict[str, str]] = []
        for role, text in reversed(texts[:last]):
            if role not in ("user", "assistant") or not text.strip():
                continue
            if len(turns) == HISTORY_TURNS or len(text) > QUESTION_CHARS:
                break  # older turns could never reach the prompt either
            turns.append({"role": role, "content": text})
        instructions = "\n\n".join(
            text for role, text in texts if role in ("system", "developer") and text.strip()
        )
        return question, turns[::-1], instructions or None

    def named(self, url_collection: str | None) -> str | None:
        """The collection the URL, ``serve_app`` or the older top-level field names."""
        ours = self.serve_app.collection if self.serve_app else None
        return url_collection or ours or self.collection

    def answer_request(self, named: str | None) -> AnswerRequest:
        """``/v1/answer``'s request, answered from the collection ``named`` (None: default)."""
        given = self.serve_app
        fields = AnswerOptions.model_fields
        ours = {f: getattr(given, f) for f in fields if given and getattr(given, f) is not None}
        legacy = ("understand", "multi_query", "strategies", "fusion", "rerank", "filters")
        options = {
            **{name: getattr(self, name) for name in legacy if getattr(self, name) is not None},
            **ours,
        }
        question, turns, instructions = self.conversation()
        return AnswerRequest.model_validate(
            {
                **options,
                **({"collection": named} if named else {}),
                "question": question,
                "messages": turns,
                "instructions": instructions,
                "sampling": self.sampling() or options.get("sampling"),
                "max_tokens": self.max_completion_tokens or self.max_tokens,
                "stream": self.stream,
            }
        )


# Where OpenAI's API has its own code for one of ours, its clients act on that one (LangChain
# and others trim the history on context_length_exceeded); ours stays in details.
OPENAI_CODES = {
    "PROMPT_TOO_LONG": ("context_length_exceeded", "messages"),
    "MODEL_NOT_FOUND": ("model_not_found", "model"),
}


def openai_error(error: ServeAppError) -> JSONResponse:
    """Our envelope in OpenAI's error shape: ``type`` and ``param`` added, ``code`` ours (or
    OpenAI's own where it has one, ours then in ``details.code``); a 422 is OpenAI's 400 (its
    clients raise BadRequestError for every invalid request)."""
    response = error_response(error)
    body = json.loads(bytes(response.body))
    detail = body["error"]
    kind = "invalid_request_error" if error.status < 500 else "server_error"
    if error.status in (401, 403):
        kind = "authentication_error" if error.status == 401 else "permission_error"
    elif error.status == 429:
        kind = "rate_limit_error"
    details = detail.get("details") or {}
    param = details.get("param") if isinstance(details, dict) else None
    if error.code in OPENAI_CODES:
        code, named = OPENAI_CODES[error.code]
        detail.update(code=code, details={**details, "code": error.code})
        param = param or named
    detail.update(type=kind, param=param)
    status = 400 if response.status_code == 422 else response.status_code
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
    return JSONResponse(body, status_code=status, headers=headers)


def _usage(done: dict[str, Any]) -> dict[str, int]:
    usage = done.get("usage") or {"prompt_tokens": 0, "completion_tokens": 0}
    total = usage["prompt_tokens"] + usage["completion_tokens"]
    return {**usage, "total_tokens": total}


def _citations(done: dict[str, Any]) -> dict[str, Any]:
    keep = ("citations", "invalid_citations", "uncited_sentences", "early_return", "timings_ms")
    return {k: done[k] for k in keep if k in done}


class Completion:
    """The OpenAI objects of one answer: a shared id, creation time and model."""

    def __init__(self, model: str, include_usage: bool = False) -> None:
        request_id = REQUEST_ID.get()
        self.id = f"chatcmpl-{request_id}"  # the X-Request-ID the logs carry
        self.created = int(time.time())
        self.model = model
        # OpenAI's stream_options.include_usage: the usage in a chunk of its own, after the
        # last choice (without it, on the last choice's chunk, as before; never on both, as
        # clients such as LangChain add up every usage they see).
        self.include_usage = include_usage

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

    async def chunks(
        self, events: AsyncIterator[AnswerEvent | Heartbeat]
    ) -> AsyncIterator[dict[str, Any] | Heartbeat]:
        """The answer's events as ``chat.completion.chunk`` objects (an ``error`` event as
        OpenAI's in-stream error object; heartbeats as they are)."""
        try:
            async for event in events:
                if isinstance(event, Heartbeat):
                    yield event
                elif isinstance(event, AnswerMetadata):
                    extension = {"results": event.data()["results"]}
                    delta = {"role": "assistant", "content": ""}
                    yield self.chunk(delta, serve_app=extension)
                elif isinstance(event, AnswerDelta):
                    yield self.chunk({"content": event.text})
                elif isinstance(event, AnswerDone):
                    data = event.data()
                    finish = event.finish_reason or "stop"
                    if not self.include_usage:
                        yield self.chunk({}, finish, usage=_usage(data), serve_app=_citations(data))
                        continue
                    yield self.chunk({}, finish, serve_app=_citations(data))
                    yield {**self._head("chat.completion.chunk"), "choices": [],
                           "usage": _usage(data)}  # fmt: skip
                elif isinstance(event, AnswerError):
                    error = reported_error(event.code, event.message, event.retry_after_s)
                    yield json.loads(bytes(openai_error(error).body))
        finally:
            await events.aclose()  # type: ignore[attr-defined]


def encode_chunk(chunk: dict[str, Any], event_id: int | None = None) -> bytes:
    """A chunk as OpenAI streams it: one ``data:`` line, no event name or id."""
    del event_id
    return f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n".encode()


class ModelNotFoundError(NotFoundError):
    code = "MODEL_NOT_FOUND"


def model_not_found(model: str, models: list[str]) -> ModelNotFoundError:
    return ModelNotFoundError(
        f"model {model!r} does not exist here; a model is a collection: {sorted(models)} "
        "(GET /v1/models)"
    )


async def model_collection(
    model: str, named: str | None, who: Principal, service: RetrievalService
) -> str | None:
    """The collection a request answers from. Each collection is a model (``GET /models``)
    and ``model`` picks one; the LLM's own id means the collection the URL or ``serve_app``
    names, else ``default`` (what ``/models`` answered before collections were models).
    ModelNotFoundError for a model that is neither, or that the URL's collection is not."""
    if service.llm is not None and model == service.llm.model_id:
        return named
    if named is not None:
        if model == named:
            return named
        raise model_not_found(model, [named])
    names = [c["name"] for c in await service.list_collections(who.scope(None))]
    if model not in names:
        raise model_not_found(model, names)
    return model


async def run_chat_completion(
    body: dict[str, Any],
    collection: str | None,
    who: Principal,
    seconds: float,
    service: RetrievalService,
    metrics: Metrics,
    receive: Receive,
) -> Response:
    try:
        who.require("read")
        try:
            refuse_unsupported(body)
            chat = ChatCompletionRequest.model_validate(body)
            log_ignored(body)
            named = await deps.within(
                seconds, model_collection(chat.model, chat.named(collection), who, service)
            )
            request = chat.answer_request(named)
        except ValidationError as invalid:
            raise RequestSchemaError(describe_validation_errors(invalid.errors())) from None
        checked = await deps.within(
            seconds, service.check_answer(request, who.scope(request.collection))
        )
    except ServeAppError as error:
        return openai_error(error)
    usage_chunk = bool(chat.stream_options and chat.stream_options.include_usage)
    completion = Completion(chat.model, usage_chunk)
    if not request.stream:
        watch = Stopwatch()
        try:
            answer = await deps.within(
                seconds, deps.unless_client_leaves(receive, service.answer(checked, seconds))
            )
        except ServeAppError as error:
            return openai_error(error)
        observe_whole_answer(answer, watch.seconds(), metrics)
        if answer["error"] is not None:
            failed = answer["error"]
            return openai_error(
                reported_error(failed["code"], failed["message"], failed.get("retry_after_s"))
            )
        return JSONResponse(completion.whole(answer))

    observed = observed_answer(service, checked, seconds, metrics)
    events = await held(observed, service.config, metrics, receive)
    if isinstance(events, AnswerError):
        return openai_error(reported_error(events.code, events.message, events.retry_after_s))
    return event_stream(
        completion.chunks(events),
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
        http: Request,
        body: dict[str, Any] = CHAT_BODY,
        name: str | None = Depends(collection),
        who: Principal = Depends(deps.principal),
        seconds: float = Depends(deps.answer_deadline_s),
        service: RetrievalService = Depends(deps.service),
        metrics: Metrics = Depends(deps.metrics),
    ) -> Response:
        return await run_chat_completion(body, name, who, seconds, service, metrics, http.receive)

    async def collection_models(
        name: str | None, who: Principal, seconds: float, service: RetrievalService
    ) -> list[str]:
        who.require("read")
        found = await deps.within(seconds, service.list_collections(who.scope(None)))
        return [c["name"] for c in found if name is None or c["name"] == name]

    @router.get("/models", response_model=ModelList)
    async def models(
        name: str | None = Depends(collection),
        who: Principal = Depends(deps.principal),
        seconds: float = Depends(deps.deadline_s),
        service: RetrievalService = Depends(deps.service),
    ) -> ModelList:
        """One model per collection of the tenant (the one the URL names, under
        ``/collections/{name}``): ``model`` in a chat completion picks the collection (which
        answers 503 without an LLM)."""
        ids = await collection_models(name, who, seconds, service)
        return ModelList(data=[ModelCard(id=i) for i in ids])

    @router.get(
        "/models/{model}",
        response_model=ModelCard,
        responses={404: {"model": OpenAIErrorEnvelope}},
    )
    async def model(
        model: str,
        name: str | None = Depends(collection),
        who: Principal = Depends(deps.principal),
        seconds: float = Depends(deps.deadline_s),
        service: RetrievalService = Depends(deps.service),
    ) -> Response:
        """One collection as a model, or OpenAI's 404 ``model_not_found``."""
        ids = await collection_models(name, who, seconds, service)
        if model not in ids:
            return openai_error(model_not_found(model, ids))
        return JSONResponse(ModelCard(id=model).model_dump())
