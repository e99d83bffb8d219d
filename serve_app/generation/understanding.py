"""Query understanding: one LLM call, its output constrained by a JSON schema, turns a question
into ``{is_relevant, semantic_query, filters}`` (and reformulations for multi-query retrieval).

The schema is the contract on both engines (llama.cpp's grammar, vLLM's structured outputs),
so the text parses; what it says is still checked here against what the store can filter on:
sections, document ids, the tenant's collections and the configured metadata fields with
their types. A filter value must also be stated in the question (or the conversation):
small models copy their example's filter into unrelated questions, and a filter nobody asked
for silently hides the answer. Whatever fails a check is dropped and logged; output that does not parse (cut at
``max_tokens``, say) means no filters and the question as the query, never an error.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from serve_app.config import UnderstandingConfig
from serve_app.generation.base import Message
from serve_app.schemas import DocumentId, SearchFilters

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 300
MAX_SECTIONS = 5
MAX_DOC_IDS = 10
MAX_RANGE_VALUES = 1024  # a {gte, lte} range becomes the list of its integers (a store filter)

_DOCUMENT_ID: TypeAdapter[str] = TypeAdapter(DocumentId)
_JSON_TYPES = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}


@dataclass
class Understanding:
    """What the call said, after validation. ``valid``: the output parsed; ``dropped``:
    each part of it that was refused, with the reason."""

    is_relevant: bool
    semantic_query: str
    queries: list[str] = field(default_factory=list)
    filters: SearchFilters | None = None
    collection: str | None = None
    valid: bool = True
    dropped: list[str] = field(default_factory=list)

    @classmethod
    def fallback(cls, question: str, reason: str) -> Understanding:
        return cls(True, question, valid=False, dropped=[reason])

    def report(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "is_relevant": self.is_relevant,
            "semantic_query": self.semantic_query,
            "filters": self.filters.model_dump(exclude_none=True) if self.filters else None,
            "collection": self.collection,
            "dropped": self.dropped,
        }


def _metadata_schema(kind: str) -> dict[str, Any]:
    if kind == "integer":
        return {
            "anyOf": [
                {"type": "integer"},
                {
                    "type": "object",
                    "properties": {"gte": {"type": "integer"}, "lte": {"type": "integer"}},
                    "required": ["gte", "lte"],
                    "additionalProperties": False,
                },
            ]
        }
    return {"type": _JSON_TYPES[kind]}


def understanding_schema(
    config: UnderstandingConfig, reformulations: int, collections: list[str], filters: bool
) -> dict[str, Any]:
    """The JSON schema of the call's output; every string and list is bounded, so the output
    is too (``max_tokens`` must leave room for it)."""
    properties: dict[str, Any] = {
        "is_relevant": {"type": "boolean"},
        "semantic_query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS},
    }
    required = ["is_relevant", "semantic_query"]
    if reformulations:
        properties["queries"] = {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS},
            "minItems": 1,
            "maxItems": reformulations,
        }
        required.append("queries")
    if filters:
        wanted: dict[str, Any] = {
            "sections": {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": 100},
                "maxItems": MAX_SECTIONS,
            },
            "doc_ids": {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": 200},
                "maxItems": MAX_DOC_IDS,
            },
        }
        if config.metadata_fields:
            wanted["metadata"] = {
                "type": "object",
                "properties": {
                    name: _metadata_schema(kind) for name, kind in config.metadata_fields.items()
                },
                "additionalProperties": False,
            }
        if len(collections) > 1:
            wanted["collection"] = {"type": "string", "enum": collections}
        properties["filters"] = {
            "type": "object",
            "properties": wanted,
            "additionalProperties": False,
        }
        required.append("filters")
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _examples(
    config: UnderstandingConfig, reformulations: int, filters: bool
) -> list[tuple[str, str]]:
    """Two worked examples (question, JSON answer), one off-topic and one relevant with a
    stated filter: small models follow a pattern far better than a description, and with only
    the first they judged everything relevant and copied its filter into unrelated questions."""
    integer_fields = [n for n, kind in config.metadata_fields.items() if kind == "integer"]
    question = "What did the results sections of studies report about statins and muscle pain?"
    relevant: dict[str, Any] = {"is_relevant": True, "semantic_query": "statins muscle pain"}
    shown_filters: dict[str, Any] = {"sections": ["Results"]}
    if integer_fields:
        name = integer_fields[0]
        question = f"What did studies with {name} 2015 report about statins and muscle pain?"
        shown_filters = {"metadata": {name: 2015}}
    off_topic: dict[str, Any] = {"is_relevant": False, "semantic_query": "joke"}
    if reformulations:
        relevant["queries"] = [
            "statin-associated muscle symptoms",
            "myopathy in patients taking statins",
            "HMG-CoA reductase inhibitors and myalgia",
        ][:reformulations]
        off_topic["queries"] = ["funny joke"]
    if filters:
        relevant["filters"] = shown_filters
        off_topic["filters"] = {}
    return [
        ("Hi! Can you tell me a joke?", json.dumps(off_topic)),
        (question, json.dumps(relevant)),
    ]


def understanding_messages(
    question: str,
    history: list[Message],
    config: UnderstandingConfig,
    reformulations: int,
    collections: list[str],
    filters: bool,
) -> list[Message]:
    rules = [
        f"You turn a user's question into a search over {config.corpus}. Reply with JSON only.",
        "is_relevant: false only when the question cannot be about these documents at all "
        "(greetings, jokes, arithmetic, unrelated topics); true otherwise.",
        "semantic_query: the question as a short standalone search query (resolve references "
        "to the earlier conversation), without filter conditions.",
    ]
    if reformulations:
        rules.append(
            f"queries: {reformulations} different search queries for the same need "
            "(synonyms, broader or narrower wording, another angle)."
        )
    if filters:
        fields = ", ".join(f"{n} ({k})" for n, k in config.metadata_fields.items())
        rules.append(
            "filters: only conditions the question states explicitly: sections (section "
            "titles such as Methods or Results), doc_ids"
            + (f", metadata ({fields}; an integer may be a range {{gte, lte}})" if fields else "")
            + (", collection" if len(collections) > 1 else "")
            + ". Otherwise an empty object {}."
        )
    examples = [
        message
        for question_shown, answer_shown in _examples(config, reformulations, filters)
        for message in (
            Message("user", f"Question: {question_shown}"),
            Message("assistant", answer_shown),
        )
    ]
    context = ""
    if history:
        turns = "\n".join(f"{m.role}: {m.content}" for m in history[-4:])
        context = f"Earlier conversation:\n{turns}\n\n"
    return [
        Message("system", "\n".join(rules)),
        *examples,
        Message("user", f"{context}Question: {question}"),
    ]


def stated(value: Any, text: str) -> bool:
    """Whether ``value`` appears in ``text``: a number as a whole number, a string as a
    case-insensitive substring; a boolean cannot be quoted and always counts."""
    if isinstance(value, bool):
        return True
    if isinstance(value, int | float):
        shown = str(int(value)) if float(value).is_integer() else str(value)
        return re.search(rf"(?<![\d.]){re.escape(shown)}(?![\d])", text) is not None
    return isinstance(value, str) and value.casefold() in text.casefold()


def _metadata_value(name: str, kind: str, value: Any) -> Any:
    """The store filter value for a metadata field, or ValueError."""
    if kind == "integer" and isinstance(value, dict):
        low, high = value.get("gte"), value.get("lte")
        if not (isinstance(low, int) and isinstance(high, int)) or isinstance(low, bool):
            raise ValueError(f"metadata.{name}: a range needs integer gte and lte")
        if not 0 <= high - low < MAX_RANGE_VALUES:
            raise ValueError(f"metadata.{name}: range {low}..{high} is empty or too wide")
        return list(range(low, high + 1))
    accepted = {
        "string": (str,),
        "integer": (int,),
        "number": (int, float),
        "boolean": (bool,),
    }[kind]
    if isinstance(value, bool) != (kind == "boolean") or not isinstance(value, accepted):
        raise ValueError(f"metadata.{name}: {value!r} is not a {kind}")
    return value


def _filters(
    raw: Any,
    config: UnderstandingConfig,
    collections: list[str],
    asked: str,
    dropped: list[str],
) -> tuple[SearchFilters | None, str | None]:
    if not isinstance(raw, dict):
        if raw is not None:
            dropped.append("filters: not an object")
        return None, None

    def grounded(field: str, value: Any) -> bool:
        values = [value["gte"], value["lte"]] if isinstance(value, dict) else [value]
        if all(stated(v, asked) for v in values):
            return True
        dropped.append(f"{field}: {str(value)[:60]!r} is not stated in the question")
        return False

    sections = [
        s.strip()
        for s in raw.get("sections") or []
        if isinstance(s, str) and s.strip() and grounded("sections", s.strip())
    ]
    doc_ids = []
    for value in raw.get("doc_ids") or []:
        try:
            doc_id = _DOCUMENT_ID.validate_python(value)
        except ValidationError:
            dropped.append(f"doc_ids: {str(value)[:60]!r} is not a document id")
            continue
        if grounded("doc_ids", doc_id):
            doc_ids.append(doc_id)
    metadata: dict[str, Any] = {}
    for name, value in (raw.get("metadata") or {}).items():
        kind = config.metadata_fields.get(name)
        if kind is None:
            dropped.append(f"metadata.{name}: not a filterable field")
            continue
        try:
            checked = _metadata_value(name, kind, value)
        except ValueError as error:
            dropped.append(str(error))
            continue
        if grounded(f"metadata.{name}", value):
            metadata[name] = checked
    collection = raw.get("collection")
    if collection is not None and collection not in collections:
        dropped.append(f"collection: {str(collection)[:60]!r} is not one of this tenant's")
        collection = None
    elif collection is not None and not grounded("collection", collection):
        collection = None
    if not (sections or doc_ids or metadata):
        return None, collection
    try:
        found = SearchFilters.model_validate(
            {
                "sections": sections[:MAX_SECTIONS] or None,
                "doc_ids": doc_ids[:MAX_DOC_IDS] or None,
                "metadata": metadata,
            },
            strict=False,
        )
    except ValidationError as error:
        dropped.append(f"filters: {error.errors()[0]['msg']}")
        return None, collection
    return found, collection


def parse_understanding(
    text: str,
    question: str,
    config: UnderstandingConfig,
    collections: list[str],
    reformulations: int,
    asked: str | None = None,
) -> Understanding:
    """The validated reading of the call's output ``text`` (see the module docstring);
    ``asked``: where filter values must be stated (default: the question)."""
    try:
        raw = json.loads(text)
    except ValueError:
        log.warning("query understanding output is not JSON (%d characters); no filters", len(text))
        return Understanding.fallback(question, "output: not JSON")
    if not isinstance(raw, dict):
        return Understanding.fallback(question, "output: not an object")
    dropped: list[str] = []
    relevant = raw.get("is_relevant")
    if not isinstance(relevant, bool):
        dropped.append("is_relevant: not a boolean")
        relevant = True
    query = raw.get("semantic_query")
    if not isinstance(query, str) or not query.strip():
        dropped.append("semantic_query: empty")
        query = question
    queries = [q.strip() for q in raw.get("queries") or [] if isinstance(q, str) and q.strip()][
        :reformulations
    ]
    filters, collection = _filters(
        raw.get("filters"), config, collections, asked or question, dropped
    )
    if dropped:
        log.warning("query understanding: dropped %s", "; ".join(dropped))
    return Understanding(
        is_relevant=relevant,
        semantic_query=query.strip()[:MAX_QUERY_CHARS],
        queries=queries,
        filters=filters,
        collection=collection,
        dropped=dropped,
    )
