"""Request and response bodies of the HTTP API (strict; unknown fields rejected)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from serve_app.schemas import (
    CollectionName,
    DocumentId,
    Metadata,
    ScoredChunk,
    SearchResponse,
    Section,
    Strategy,
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class DocumentIn(_Body):
    """A document as clients send it; the tenant comes from the credential, never the body."""

    id: DocumentId
    title: str = Field(default="", max_length=10_000)
    text: str | None = None
    sections: list[Section] | None = None
    metadata: Metadata = Field(default_factory=dict)

    @model_validator(mode="after")
    def _text_or_sections(self) -> DocumentIn:
        if (self.text is None) == (self.sections is None):
            raise ValueError("a document needs exactly one of 'text' or 'sections'")
        return self


class IngestRequest(_Body):
    documents: list[DocumentIn] = Field(min_length=1)


class IngestResponse(_Body):
    documents: int
    chunks_written: int
    written: list[str]
    unchanged: list[str]
    stale_chunks_removed: int
    timings_ms: dict[str, float]


class SearchHit(_Body):
    doc_id: str
    chunk_id: str
    text: str
    title: str
    section: str
    heading_chain: list[str]
    score: float
    fused_score: float
    rerank_score: float | None
    scores: dict[str, float]
    ranks: dict[str, int]
    contributions: dict[str, float] = Field(
        description="what each strategy's list added to fused_score (they sum to it)"
    )
    metadata: Metadata
    order: int
    char_start: int
    char_end: int
    source: str | None

    @classmethod
    def from_scored(cls, item: ScoredChunk) -> SearchHit:
        chunk = item.chunk
        return cls(
            doc_id=chunk.doc_id,
            chunk_id=chunk.id,
            text=chunk.text,
            title=chunk.title,
            section=chunk.section,
            heading_chain=list(chunk.heading_chain),
            score=item.score,
            fused_score=item.fused_score,
            rerank_score=item.rerank_score,
            scores=item.scores,
            ranks=item.ranks,
            contributions=item.contributions,
            metadata=chunk.metadata,
            order=chunk.order,
            char_start=chunk.char_start,
            char_end=chunk.char_end,
            source=chunk.source,
        )


class SearchResponseOut(_Body):
    query: str
    results: list[SearchHit]
    fusion: str
    reranked: bool
    strategies: list[Strategy]
    total: int
    timings_ms: dict[str, float]

    @classmethod
    def from_response(cls, response: SearchResponse) -> SearchResponseOut:
        return cls(
            query=response.query,
            results=[SearchHit.from_scored(r) for r in response.results],
            fusion=response.fusion,
            reranked=response.reranked,
            strategies=response.strategies,
            total=response.total,
            timings_ms=response.timings_ms,
        )


class DeleteResponse(_Body):
    deleted: str
    chunks_removed: int


class ErrorDetail(_Body):
    code: str
    message: str
    request_id: str
    # Structured facts where an error has them: for a failed upload, the ids its finished
    # sub-batches wrote ("written") or found unchanged ("unchanged").
    details: dict[str, Any] | None = None


class ErrorEnvelope(_Body):
    error: ErrorDetail


class ReadyResponse(_Body):
    ready: bool
    checks: dict[str, Literal["ok", "failing", "timeout"]]
    instance: str | None = None  # a local run's id (two runs on one machine never share one)


class CollectionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: CollectionName


class CollectionOut(BaseModel):
    name: str
    state: str
    created_at: str | None = None


class CollectionDetail(CollectionOut):
    chunks: dict[str, int]
    documents: dict[str, int]
    models: dict[str, Any] | None = None


class CollectionList(BaseModel):
    collections: list[CollectionOut]
    tenant: str = Field(description="the tenant these collections belong to: the caller's")
    principal: str = Field(description="who the credential names: key:<name>, jwt:<sub>, anonymous")
    scopes: list[str] = Field(description="what the credential may do: read, write, admin")


class CollectionDeleted(BaseModel):
    deleted: str
    chunks_removed: int
