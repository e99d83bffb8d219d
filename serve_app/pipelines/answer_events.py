"""The events of an answer, typed: ``AnswerMetadata``, ``AnswerDelta``, ``AnswerDone``,
``AnswerError`` (the ``AnswerEvent`` union, told apart by ``event``), produced once by the
answer pipeline and read by every door (HTTP, the OpenAI route, the CLI, the ``--url`` client,
MCP). ``Heartbeat`` is the doors' own: a keep-alive due while the pipeline is silent.

``event`` is the event's name on the wire (the SSE ``event:`` line) and never part of its
``data()``; ``data()`` is the event's body exactly as ``/v1/answer`` sends it (a field
documented as "absent when unknown" is left out, never sent as null). The models pickle, so
events may cross a Ray handle."""

from __future__ import annotations

import logging
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_serializer
from pydantic_core.core_schema import SerializerFunctionWrapHandler

from serve_app.errors import OverloadedError, ServeAppError

log = logging.getLogger(__name__)


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Fields left out of ``data()`` when None (absent on the wire rather than null).
    omit_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _drop_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        body: dict[str, Any] = handler(self)
        for name in self.omit_none:
            if body.get(name, 0) is None:
                del body[name]
        return body

    def data(self) -> dict[str, Any]:
        """The event's body as sent (``event`` itself is the SSE event name)."""
        return self.model_dump(exclude={"event"})


class MultiQueryScores(BaseModel):
    """How a passage ranked across the sub-queries of a multi-query answer."""

    rrf: float
    normalized_rrf: float
    avg_similarity: float
    ranks: dict[str, int]


class PassageResult(_Event):
    """A passage the prompt holds, numbered as the model sees it, with its provenance and
    scores; ``text``, ``char_start`` and ``char_end`` are exactly what the prompt held
    (``trimmed`` when it was cut on a sentence boundary)."""

    omit_none = ("multi_query",)

    passage: int
    doc_id: str
    chunk_id: str
    title: str
    section: str
    heading_chain: list[str]
    char_start: int
    char_end: int
    trimmed: bool
    source: str | None
    metadata: dict[str, Any]
    score: float
    scores: dict[str, float]
    ranks: dict[str, int]
    found_by: list[str]
    text: str
    multi_query: MultiQueryScores | None = Field(
        default=None, description="multi-query answers only"
    )


class AnswerMetadata(_Event):
    """The first event: what was understood and retrieved, before any text."""

    omit_none = ("top_k", "prompt_tokens")

    event: Literal["metadata"] = "metadata"
    question: str
    collection: str
    semantic_query: str
    sub_queries: list[str]
    filters: dict[str, Any] | None
    filters_source: Literal["request", "understanding"] | None
    understanding: dict[str, Any] | None
    history_turns: int
    model: str
    top_k: int | None = Field(
        default=None, description="absent when an irrelevant question ended the answer"
    )
    results: list[PassageResult] = Field(default_factory=list)
    prompt_tokens: int | None = Field(
        default=None, description="absent when no generation was opened"
    )
    timings_ms: dict[str, float] = Field(default_factory=dict)


class AnswerDelta(_Event):
    """Text as the model writes it."""

    event: Literal["delta"] = "delta"
    text: str


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int


class AnswerDone(_Event):
    """The last event of an answer that ended: the whole text, its citations checked against
    the passages, usage and stage timings; ``early_return`` names why no answer was generated
    (``irrelevant``, ``no_results``)."""

    event: Literal["done"] = "done"
    answer: str
    citations: list[dict[str, Any]] = Field(default_factory=list)
    invalid_citations: list[dict[str, Any]] = Field(default_factory=list)
    uncited_sentences: list[dict[str, Any]] = Field(default_factory=list)
    unsupported_sentences: list[dict[str, Any]] = Field(default_factory=list)
    cited_documents: list[str] = Field(default_factory=list)
    early_return: Literal["irrelevant", "no_results"] | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)


class AnswerError(_Event):
    """The last event of an answer that failed after its headers: the error's code and
    message as its status would carry them (``retry_after_s`` when overloaded)."""

    omit_none = ("details", "retry_after_s")

    event: Literal["error"] = "error"
    code: str
    message: str
    details: Any = None
    retry_after_s: float | None = None

    @classmethod
    def of(cls, error: ServeAppError) -> AnswerError:
        retry = error.retry_after_s if isinstance(error, OverloadedError) else None
        if error.public is not None:  # the client is told less: the whole story to the log
            log.warning("answer failed: %s: %s", error.code, error.message)
        return cls(
            code=error.code,
            message=error.client_message(),
            details=error.details,
            retry_after_s=retry,
        )


class Heartbeat(BaseModel):
    """A keep-alive the doors send while the answer is silent (an SSE comment)."""

    event: Literal["heartbeat"] = "heartbeat"


AnswerEvent = Annotated[
    AnswerMetadata | AnswerDelta | AnswerDone | AnswerError, Field(discriminator="event")
]
ANSWER_EVENT: TypeAdapter[AnswerEvent] = TypeAdapter(AnswerEvent)


def parse_event(event: str, data: dict[str, Any]) -> AnswerEvent:
    """An event read off the wire (its SSE name and body) as its model; fields a newer
    service added are ignored (``serve_app.client.read``)."""
    return ANSWER_EVENT.validate_python({**data, "event": event}, extra="ignore")
