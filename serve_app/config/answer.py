"""Answers: query understanding, multi-query retrieval, the prompt, limits and deadlines."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from serve_app.config.base import Section
from serve_app.schemas import MetadataKey


class UnderstandingConfig(Section):
    """One structured LLM call before retrieval: ``{is_relevant, semantic_query, filters}``
    (and the reformulations when multi-query is on), constrained by a JSON schema.

    ``corpus``: what the collection holds, told to the model for the relevance judgment.
    ``metadata_fields``: the document metadata the model may filter on, with each field's
    type (integer fields also take a ``{gte, lte}`` range); sections, document ids and the
    tenant's collections are always offered."""

    enabled: bool = True
    max_tokens: int = Field(default=256, ge=32)
    corpus: str = "the documents indexed in this collection"
    metadata_fields: dict[MetadataKey, Literal["string", "integer", "number", "boolean"]] = Field(
        default_factory=dict
    )


class MultiQueryConfig(Section):
    """``enabled``: the default of a request's ``multi_query``. ``queries``: reformulations
    asked for (the semantic query is searched besides them; duplicates dropped).
    Aggregation (serve_app/query_fusion.py): ``score = w * avg_similarity + (1 - w) *
    normalized_rrf`` with ``w = similarity_weight`` and RRF's ``k = rrf_k``, the question's
    own list weighing ``question_weight`` and each reformulation's 1; each sub-query
    retrieves ``per_query_top_k`` chunks. The defaults were chosen on SciFact's train split
    (``python -m benchmarks answers --suites multi_query --split train``, docs/answers.md)."""

    enabled: bool = False
    queries: int = Field(default=3, ge=1, le=8)
    similarity_weight: float = Field(default=0.5, ge=0, le=1)
    rrf_k: int = Field(default=10, ge=1)
    question_weight: float = Field(default=4.0, gt=0, le=16)
    per_query_top_k: int = Field(default=20, ge=1, le=200)


class AnswerDeadlines(Section):
    """Each stage's bound; past one the stage is cut (understanding: no filters; generation:
    an ``error`` event after the search results), never the whole answer."""

    understand_s: float = Field(default=20.0, gt=0)
    retrieve_s: float = Field(default=15.0, gt=0)
    first_token_s: float = Field(default=60.0, gt=0)
    total_s: float = Field(default=180.0, gt=0)


class AnswerConfig(Section):
    """``top_k`` passages (at most ``max_passage_chars`` each) go into the prompt;
    ``max_tokens`` caps an answer (a request may ask for up to ``max_tokens_limit``);
    ``history_tokens`` bounds the earlier turns of ``messages`` kept (newest first, counted
    as characters / ``chars_per_token``). ``heartbeat_s``: a streamed answer sends an SSE
    comment this often while no event is due (understanding, retrieval, the wait for a slot,
    the prompt's reading), so proxies with an idle timeout above it keep the stream."""

    heartbeat_s: float = Field(default=15.0, gt=0, le=300)
    top_k: int = Field(default=5, ge=1, le=20)
    max_passage_chars: int = Field(default=1200, ge=100)
    max_tokens: int = Field(default=384, ge=1)
    max_tokens_limit: int = Field(default=1024, ge=1)
    history_tokens: int = Field(default=1024, ge=0)
    chars_per_token: float = Field(default=3.0, gt=0)
    understanding: UnderstandingConfig = Field(default_factory=UnderstandingConfig)
    multi_query: MultiQueryConfig = Field(default_factory=MultiQueryConfig)
    deadlines: AnswerDeadlines = Field(default_factory=AnswerDeadlines)
