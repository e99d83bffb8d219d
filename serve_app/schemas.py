"""Data contracts shared by every layer (pydantic v2, strict, unknown fields rejected)."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

Strategy = Literal["bm25", "splade", "dense"]
STRATEGIES: tuple[Strategy, ...] = ("bm25", "splade", "dense")
FusionMethod = Literal["rrf", "weighted", "dbsf"]
FUSION_METHODS: tuple[FusionMethod, ...] = ("rrf", "weighted", "dbsf")

# Values the stores can hold and compare: 64-bit integers, finite floats.
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
Scalar = str | Int64 | FiniteFloat | bool
MetadataValue = Scalar | list[Scalar]
# A filter matches one value or any of a list; Qdrant matches lists of strings or of integers.
# Each string of a filter is bounded too: it goes into every strategy's store query.
FilterText = Annotated[str, Field(max_length=1024)]
FilterValue = (
    FilterText
    | Int64
    | FiniteFloat
    | bool
    | Annotated[list[FilterText], Field(max_length=1024)]
    | Annotated[list[Int64], Field(max_length=1024)]
)
# Metadata keys become payload paths (`metadata.<key>`) in Qdrant and field names in
# OpenSearch: dots, brackets, blanks or control characters would address another field or be
# refused by the engine, so keys are plain identifiers.
MetadataKey = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")]
Metadata = dict[MetadataKey, MetadataValue]
# The longest search query; a longer question is searched by its last QUERY_CHARS characters.
QUERY_CHARS = 4096


def printable_id(value: str) -> str:
    """``value`` unless it holds a character of Unicode's "other" categories: control (NUL,
    ESC), format (the bidirectional overrides such as U+202E, zero-width joiners), surrogate,
    private use or unassigned. Ids are echoed in logs, terminals and UIs, where such a
    character hides or reorders what follows it."""
    for position, char in enumerate(value):
        if unicodedata.category(char).startswith("C"):
            raise ValueError(
                f"ids must be printable: U+{ord(char):04X} at position {position} is a "
                "control, format or unassigned character"
            )
    return value


# Ids appear in URLs and payload filters: keep them printable and bounded.
DocumentId = Annotated[
    str,
    Field(min_length=1, max_length=512, pattern=r"^[^\s/?#][^\s?#]*$"),
    AfterValidator(printable_id),
]
TENANT_PATTERN = r"^[A-Za-z0-9_.:-]+$"
TENANT_MAX_LENGTH = 128
_TENANT_RE = re.compile(rf"[A-Za-z0-9_.:-]{{1,{TENANT_MAX_LENGTH}}}")


def valid_tenant_id(value: object) -> str:
    """``value`` if it is a tenant id, else ValueError: the one rule every credential source
    (API key, JWT claim, anonymous tenant) and every scope key goes through. A tenant id can
    hold no ``/``, so no tenant id names another tenant's collection."""
    if not isinstance(value, str) or not _TENANT_RE.fullmatch(value):
        shown = repr(value)[:40] if isinstance(value, str) else type(value).__name__
        raise ValueError(
            f"not a tenant id: {shown} (1-{TENANT_MAX_LENGTH} characters of A-Z a-z 0-9 _ . : -)"
        )
    return value


TenantId = Annotated[
    str,
    Field(min_length=1, max_length=TENANT_MAX_LENGTH, pattern=TENANT_PATTERN),
    AfterValidator(valid_tenant_id),
]

DEFAULT_TENANT = "default"
# A named corpus inside a tenant; part of every chunk's payload and filter, like the tenant.
COLLECTION_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
COLLECTION_MAX_LENGTH = 64
_COLLECTION_RE = re.compile(rf"[a-z0-9][a-z0-9_-]{{0,{COLLECTION_MAX_LENGTH - 1}}}")


def valid_collection_name(value: object) -> str:
    """``value`` if it is a collection name, else ValueError."""
    if not isinstance(value, str) or not _COLLECTION_RE.fullmatch(value):
        shown = repr(value)[:40] if isinstance(value, str) else type(value).__name__
        raise ValueError(
            f"not a collection name: {shown} (1-{COLLECTION_MAX_LENGTH} characters of a-z 0-9 "
            "_ -, starting with a letter or digit)"
        )
    return value


CollectionName = Annotated[
    str,
    Field(min_length=1, max_length=COLLECTION_MAX_LENGTH, pattern=COLLECTION_PATTERN),
    AfterValidator(valid_collection_name),
]
DEFAULT_COLLECTION = "default"


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=False, allow_inf_nan=False)


class Section(_Strict):
    """A node of a document's section tree: a heading, its own text, its subsections."""

    title: str = ""
    text: str = ""
    children: list[Section] = Field(default_factory=list)

    def walk(self, chain: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Section]]:
        """Depth-first (heading chain, section) pairs, this section first."""
        here = (*chain, self.title) if self.title else chain
        yield here, self
        for child in self.children:
            yield from child.walk(here)


class Document(_Strict):
    """A source document: plain ``text`` or a ``sections`` tree (exactly one of them). It
    carries no tenancy: the store scope it is written to is the ingest call's."""

    id: DocumentId
    title: str = ""
    text: str | None = None
    sections: list[Section] | None = None
    metadata: Metadata = Field(default_factory=dict)
    source: str | None = None

    @model_validator(mode="after")
    def _text_or_sections(self) -> Document:
        if (self.text is None) == (self.sections is None):
            raise ValueError("a document needs exactly one of 'text' or 'sections'")
        if not any(block.strip() for _, block in self.iter_blocks()):
            raise ValueError(f"document {self.id!r} has no text")
        return self

    def iter_blocks(self) -> Iterator[tuple[tuple[str, ...], str]]:
        """(heading chain, body text) for every text-bearing part, in reading order."""
        if self.text is not None:
            yield (), self.text
            return
        for top in self.sections or []:
            for chain, section in top.walk():
                if section.text.strip():
                    yield chain, section.text

    def char_count(self) -> int:
        return len(self.title) + sum(len(text) for _, text in self.iter_blocks())

    def text_bytes(self) -> int:
        """The UTF-8 bytes of what ``char_count`` counts (what an upload is charged)."""
        return len(self.title.encode()) + sum(len(t.encode()) for _, t in self.iter_blocks())

    def repeated_chars(self) -> int:
        """Characters each chunk of this document carries besides its own text: the title,
        the longest heading chain over text, the source and the metadata (as JSON)."""
        chain = max((sum(map(len, c)) for c, _ in self.iter_blocks()), default=0)
        metadata = json.dumps(self.metadata, ensure_ascii=False, separators=(",", ":"))
        return len(self.title) + chain + len(self.source or "") + len(metadata)


class Chunk(_Strict):
    """A retrievable unit with its provenance.

    ``char_start``/``char_end`` index into the document's canonical text, the body blocks
    joined by ``BLOCK_SEPARATOR`` (see ``serve_app.chunking.base.canonical_text``).
    """

    id: str
    doc_id: DocumentId
    text: str
    title: str = ""
    section: str = ""
    heading_chain: list[str] = Field(default_factory=list)
    order: int = Field(ge=0)
    char_start: int = Field(ge=0)
    char_end: int = Field(ge=0)
    metadata: Metadata = Field(default_factory=dict)
    source: str | None = None


class SparseVector(_Strict):
    """A sparse vector: parallel ``indices``/``values``; ``terms`` when the vocabulary is known."""

    indices: list[int]
    values: list[float]
    terms: list[str] | None = None

    @model_validator(mode="after")
    def _same_length(self) -> SparseVector:
        if len(self.indices) != len(self.values):
            raise ValueError("indices and values differ in length")
        if self.terms is not None and len(self.terms) != len(self.indices):
            raise ValueError("terms and indices differ in length")
        if len(set(self.indices)) != len(self.indices):
            raise ValueError("duplicate indices")
        return self

    def as_term_weights(self) -> dict[str, float]:
        """term -> weight (OpenSearch ``rank_features`` shape); needs ``terms``."""
        if self.terms is None:
            raise ValueError("this sparse vector carries no term strings")
        return dict(zip(self.terms, self.values, strict=True))

    def __len__(self) -> int:
        return len(self.indices)


class SearchFilters(_Strict):
    """Filters applied inside every strategy's retrieval (never after fusion)."""

    doc_ids: list[DocumentId] | None = Field(default=None, max_length=1024)
    sections: list[FilterText] | None = Field(default=None, max_length=1024)
    metadata: dict[MetadataKey, FilterValue] = Field(default_factory=dict, max_length=64)


class FusionSpec(_Strict):
    """How per-strategy ranked lists are combined. Unset fields take the configured defaults."""

    method: FusionMethod = "rrf"
    k: int | None = Field(default=None, ge=1, le=10_000)
    weights: dict[Strategy, float] | None = None

    @field_validator("weights")
    @classmethod
    def _non_negative(cls, weights: dict[str, float] | None) -> dict[str, float] | None:
        if weights is not None and any(w < 0 for w in weights.values()):
            raise ValueError("fusion weights must be >= 0")
        return weights


class SearchRequest(_Strict):
    query: str = Field(max_length=QUERY_CHARS)
    collection: CollectionName = DEFAULT_COLLECTION
    top_k: int = Field(default=10, ge=1, le=200)
    strategies: list[Strategy] | None = None
    fusion: FusionSpec | None = None
    rerank: bool | None = None
    filters: SearchFilters | None = None

    @field_validator("query")
    @classmethod
    def _not_blank(cls, query: str) -> str:
        if not query.strip():
            raise ValueError("query must not be empty")
        return query

    @field_validator("strategies")
    @classmethod
    def _distinct(cls, strategies: list[str] | None) -> list[str] | None:
        if strategies is not None:
            if not strategies:
                raise ValueError("strategies must name at least one of bm25, splade, dense")
            if len(set(strategies)) != len(strategies):
                raise ValueError("strategies must not repeat")
        return strategies


class ScoredChunk(_Strict):
    """A result: the chunk, its final score, and how each strategy saw it (its score and
    rank in each list, and what each list added to ``fused_score``)."""

    chunk: Chunk
    score: float
    fused_score: float
    rerank_score: float | None = None
    scores: dict[str, float] = Field(default_factory=dict)
    ranks: dict[str, int] = Field(default_factory=dict)
    contributions: dict[str, float] = Field(default_factory=dict)


class SearchResponse(_Strict):
    query: str
    results: list[ScoredChunk]
    fusion: str
    reranked: bool
    strategies: list[Strategy]
    total: int
    timings_ms: dict[str, float]


class IngestResult(_Strict):
    """What an ingest call did, per document."""

    documents: int = 0
    chunks_written: int = 0
    written: list[str] = Field(default_factory=list)
    unchanged: list[str] = Field(default_factory=list)
    stale_chunks_removed: int = 0
    timings_ms: dict[str, float] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ScopeKey:
    """What every store call is scoped by: one tenant and one of its collections, or every
    collection of the tenant (``collection`` None; inspection only).

    A structured value, not a string convention: both parts are checked on construction
    (``valid_tenant_id``, ``valid_collection_name``), and nothing parses a string into a scope,
    so no string (a token claim ``tenA/proj``, say) can address another tenant's collection.
    """

    tenant: str
    collection: str | None = DEFAULT_COLLECTION

    def __post_init__(self) -> None:
        valid_tenant_id(self.tenant)
        if self.collection is not None:
            valid_collection_name(self.collection)

    @property
    def is_default(self) -> bool:
        """Whether this is the tenant's ``default`` collection, which every tenant has (the
        one place that rule is written)."""
        return self.collection == DEFAULT_COLLECTION

    @property
    def every_collection(self) -> bool:
        return self.collection is None

    def __str__(self) -> str:
        """For logs and the chunk-id owner (``chunking.base.chunk_id``): the tenant for its
        ``default`` collection, ``tenant/collection`` otherwise, ``tenant/*`` for all. Neither
        part can hold a ``/``, so the text is unambiguous; it is never parsed back."""
        if self.is_default:
            return self.tenant
        return f"{self.tenant}/{self.collection or '*'}"


class DocumentInfo(_Strict):
    id: DocumentId
    tenant_id: TenantId
    collection: CollectionName = DEFAULT_COLLECTION
    title: str
    metadata: Metadata
    source: str | None
    content_hash: str
    chunk_ids: list[str]



class DocumentSummary(_Strict):
    """One line of a collection's document list."""

    id: DocumentId
    title: str
    source: str | None
    metadata: Metadata
    content_hash: str
    chunk_count: int


DOCUMENT_PAGE_MAX = 1000

# A page's cursor is a stored chunk id (``chunking.base.stored_chunk_id``: a UUID); each
# store reads it as its own position.
DocumentCursor = Annotated[
    str, Field(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
]


class DocumentPage(_Strict):
    """Documents of a collection in the stores' order, and where the next page starts
    (None after the last). A page may hold fewer than asked while more follow: a document
    being written or replaced right then is listed once it is whole."""

    documents: list[DocumentSummary]
    next_cursor: DocumentCursor | None

# A question or an earlier turn may be long (a client may put its own context there): the
# prompt's token budget (answer.max_question_tokens, answer.history_tokens) decides what fits;
# these bound only what is parsed and counted.
QUESTION_CHARS = 20_000
HISTORY_TURNS = 64


class ChatTurn(_Strict):
    """An earlier turn of a conversation (``AnswerRequest.messages``), oldest first."""

    role: Literal["user", "assistant"]
    content: str = Field(min_length=1, max_length=QUESTION_CHARS)


class Sampling(_Strict):
    """How the answer's tokens are drawn, OpenAI's names and ranges (unset: the engine's and
    ``llm.temperature``'s defaults): ``temperature`` 0 is greedy, ``stop`` ends the answer at
    the first of up to four strings (not included), ``seed`` makes sampling repeatable on one
    engine. ``top_k`` is the sampling cut-off (llama.cpp's and vLLM's), not a passage count."""

    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=1, le=1000)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    stop: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        default=None, max_length=4
    )
    seed: Int64 | None = None


class AnswerOptions(BaseModel):
    """How an answer is found and written, the same fields on both doors (``/v1/answer``'s
    body, the OpenAI route's extension fields): unset, each takes the ``answer:``
    configuration's default. ``understand`` (the query understanding call), ``multi_query``
    (reformulations retrieved and aggregated), ``top_k`` passages, ``max_tokens``;
    ``strategies``, ``fusion``, ``rerank`` and ``filters`` are the search's (explicit
    ``filters`` win over understood ones)."""

    top_k: int | None = Field(default=None, ge=1, le=20)
    understand: bool | None = None
    multi_query: bool | None = None
    strategies: list[Strategy] | None = None
    fusion: FusionSpec | None = None
    rerank: bool | None = None
    filters: SearchFilters | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=8192)
    sampling: Sampling | None = None

    @field_validator("strategies")
    @classmethod
    def _strategies_distinct(cls, strategies: list[str] | None) -> list[str] | None:
        return SearchRequest._distinct(strategies)


class AnswerRequest(_Strict, AnswerOptions):
    """A question to answer from a collection's documents, with citations, and its earlier
    turns (``AnswerOptions`` for the rest). ``stream``: Server-Sent Events (default) or one
    JSON answer."""

    question: str = Field(max_length=QUESTION_CHARS)
    collection: CollectionName = DEFAULT_COLLECTION
    messages: list[ChatTurn] = Field(default_factory=list, max_length=HISTORY_TURNS)
    instructions: str | None = Field(default=None, max_length=4096)
    stream: bool = True

    @field_validator("question")
    @classmethod
    def _question_not_blank(cls, question: str) -> str:
        if not question.strip():
            raise ValueError("question must not be empty")
        return question
