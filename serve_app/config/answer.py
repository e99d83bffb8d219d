"""Answers: query understanding, multi-query retrieval, the prompt, limits and deadlines."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from serve_app.config.base import Section
from serve_app.errors import RequestSchemaError
from serve_app.schemas import MetadataKey

# Allowances, in tokens, for the prompt's fixed text: the system prompt, the reminder after
# the passages, the chat template and the block's tags; and each passage's tag (number, title
# and section are inside max_passage_tokens). tests/serve_app/generation/test_prompt_budget.py
# checks them against the shipped models' tokenizers.
PROMPT_OVERHEAD_TOKENS = 320
PASSAGE_MARKUP_TOKENS = 24
# Each earlier turn's own template markup (its role header and end-of-turn token), counted
# against answer.history_tokens with the turn's text: 64 short turns carry about 320 tokens
# of it, which the text alone left out of every allowance.
HISTORY_TURN_TOKENS = 8


class UnderstandingConfig(Section):
    """One structured LLM call before retrieval: ``{is_relevant, semantic_query, filters}``
    (and the reformulations when multi-query is on), constrained by a JSON schema.

    ``corpus``: what the collection holds, told to the model for the relevance judgment.
    ``metadata_fields``: the document metadata the model may filter on, with each field's
    type (integer fields also take a ``{gte, lte}`` range); sections, document ids and the
    tenant's collections are always offered.
    ``relevance_floor``: the model's "irrelevant" is overruled when the question's own search
    finds a passage at least this similar (the reranker's score, else the dense cosine; its
    scale is the model's, so calibrate it with ``python -m benchmarks answers --suites gate``);
    None: the model's judgment alone ends the request before retrieval."""

    enabled: bool = True
    max_tokens: int = Field(default=256, ge=32)
    corpus: str = "the documents indexed in this collection"
    relevance_floor: float | None = Field(default=None, ge=0, le=1)
    metadata_fields: dict[MetadataKey, Literal["string", "integer", "number", "boolean"]] = Field(
        default_factory=dict
    )


class MultiQueryConfig(Section):
    """``enabled``: the default of a request's ``multi_query``. ``queries``: reformulations
    asked for (the semantic query is searched besides them; duplicates dropped).
    Aggregation (serve_app/fusion/queries.py): ``score = w * avg_similarity + (1 - w) *
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
    """The prompt budget, in the model's tokens (``llm.context_tokens`` must hold it):
    ``top_k`` passages of at most ``max_passage_tokens`` each (title and section included;
    a longer chunk keeps its first whole sentences), the earlier turns of ``messages`` within
    ``history_tokens`` (newest first), a question of at most ``max_question_tokens``, and
    ``max_tokens`` for the answer (a request may ask for up to ``max_tokens_limit``). A
    request whose prompt and ``max_tokens`` exceed the window is refused (422
    PROMPT_TOO_LONG); the defaults always fit (checked when the configuration loads).
    ``heartbeat_s``: a streamed answer sends an SSE comment this often while no event is due
    (understanding, retrieval, the wait for a slot, the prompt's reading), so proxies with an
    idle timeout above it keep the stream."""

    heartbeat_s: float = Field(default=15.0, gt=0, le=300)
    resume_s: float = Field(default=10.0, ge=0, le=600)
    top_k: int = Field(default=5, ge=1, le=20)
    max_passage_tokens: int = Field(default=256, ge=32)
    max_question_tokens: int = Field(default=512, ge=16)
    max_tokens: int = Field(default=384, ge=1)
    max_tokens_limit: int = Field(default=1024, ge=1)
    history_tokens: int = Field(default=1024, ge=0)
    understanding: UnderstandingConfig = Field(default_factory=UnderstandingConfig)
    multi_query: MultiQueryConfig = Field(default_factory=MultiQueryConfig)
    deadlines: AnswerDeadlines = Field(default_factory=AnswerDeadlines)

    def worst_prompt_tokens(
        self, top_k: int | None = None, max_tokens: int | None = None
    ) -> dict[str, int]:
        """The largest prompt a request can make with ``top_k`` passages and ``max_tokens``
        (the defaults when None), part by part, in tokens; ``total`` must fit the context."""
        parts = {
            "fixed": PROMPT_OVERHEAD_TOKENS,
            "passages": (top_k or self.top_k) * (self.max_passage_tokens + PASSAGE_MARKUP_TOKENS),
            "history": self.history_tokens,
            "question": self.max_question_tokens,
            "max_tokens": max_tokens or self.max_tokens,
        }
        return {**parts, "total": sum(parts.values())}

    def top_k_limit(self, context_tokens: int) -> int:
        """The most passages a request may ask for: the largest ``top_k`` whose worst prompt
        (``worst_prompt_tokens``: every other part at its allowance, the default
        ``max_tokens``) fits ``context_tokens``. The guarantee the defaults have (checked at
        load) then holds for every ``top_k`` a request may ask, and the deadlines sized for
        the defaults' prompt hold for it too (the prompt is most of the time to a first
        token on a CPU)."""
        others = self.worst_prompt_tokens(top_k=1)
        room = context_tokens - (others["total"] - others["passages"])
        return max(0, room // (self.max_passage_tokens + PASSAGE_MARKUP_TOKENS))

    def check_top_k(self, top_k: int, context_tokens: int) -> None:
        """RequestSchemaError (422 INVALID_INPUT, ``details.limit``) for a ``top_k`` above
        ``top_k_limit``, naming the numbers it comes from."""
        limit = self.top_k_limit(context_tokens)
        if top_k <= limit:
            return
        others = self.worst_prompt_tokens(top_k=1)
        error = RequestSchemaError(
            f"top_k {top_k} is above {limit}, the most passages this deployment answers: "
            f"{limit} passages of up to {self.max_passage_tokens} tokens (answer."
            f"max_passage_tokens, +{PASSAGE_MARKUP_TOKENS} markup) and the rest of the "
            f"largest prompt ({others['total'] - others['passages']} tokens: answer."
            "history_tokens, answer.max_question_tokens, answer.max_tokens and the prompt's "
            f"own text) fill llm.context_tokens ({context_tokens})",
            details={"field": "top_k", "limit": limit},
        )
        raise error
