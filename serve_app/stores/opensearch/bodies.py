"""Request bodies the OpenSearch adapter sends, as pure functions.

Kept apart from the transport so every body can be checked against the official OpenSearch
API specification (tests/serve_app/stores/test_opensearch_contract.py) without a server.
Written to the documented query DSL of OpenSearch 2.x/3.x.
"""

from __future__ import annotations

import re
from typing import Any

from serve_app.chunking.base import contextual_header
from serve_app.config import OpenSearchConfig
from serve_app.schemas import ScopeKey, SearchFilters, SparseVector
from serve_app.stores.payloads import HEAD_FIELDS
from serve_app.stores.registry import REGISTRY_RECORD_FIELDS
from serve_app.stores.scope import scope_payload
from serve_app.stores.values import DocumentWrite, IndexModels

MAPPING_VERSION = 3
"""Bumped whenever the mapping below changes; stored in the index's ``_meta``."""

_TEXT = {"type": "text", "analyzer": "english"}


def index_body(config: OpenSearchConfig, models: IndexModels) -> dict[str, Any]:
    """Settings and the versioned mapping of a physical chunk index."""
    return {
        "settings": {
            "index": {
                "number_of_shards": config.number_of_shards,
                "number_of_replicas": config.number_of_replicas,
            },
        },
        "mappings": {
            "dynamic": "strict",
            "_meta": {"mapping_version": MAPPING_VERSION, "models": models.as_dict()},
            # Metadata keys are free-form; their strings are exact-match keywords (filters).
            "dynamic_templates": [
                {
                    "metadata_strings": {
                        "path_match": "metadata.*",
                        "match_mapping_type": "string",
                        "mapping": {"type": "keyword"},
                    }
                }
            ],
            "properties": {
                "id": {"type": "keyword"},
                "doc_id": {"type": "keyword"},
                "tenant_id": {"type": "keyword"},
                "collection": {"type": "keyword"},
                # What the encoders see (title, heading chain, text) as one field: the default
                # BM25 field. The parts are indexed on their own for field boosts.
                "body": _TEXT,
                "content": _TEXT,
                "title": {**_TEXT, "fields": {"keyword": {"type": "keyword", "ignore_above": 512}}},
                "section": {**_TEXT, "fields": {"keyword": {"type": "keyword"}}},
                "heading_chain": _TEXT,
                "order": {"type": "integer"},
                "char_start": {"type": "integer"},
                "char_end": {"type": "integer"},
                "source": {"type": "keyword", "index": False},
                "metadata": {"type": "object", "dynamic": True},
                "content_hash": {"type": "keyword"},
                "chunk_count": {"type": "integer"},
                "splade": {"type": "rank_features"},
            },
        },
    }


def indexed_fields(properties: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Field path -> type of every indexed field of a mapping (sub-fields included)."""
    found: dict[str, str] = {}
    for name, spec in sorted(properties.items()):
        path = f"{prefix}{name}"
        if "properties" in spec:
            found.update(indexed_fields(spec["properties"], f"{path}."))
            continue
        if spec.get("index", True) is not False and "type" in spec:
            found[path] = spec["type"]
        for sub, sub_spec in sorted(spec.get("fields", {}).items()):
            found[f"{path}.{sub}"] = sub_spec.get("type", "")
    return found


def alias_switch_body(alias: str, new_index: str, old_index: str | None) -> dict[str, Any]:
    """One atomic ``_aliases`` request: the alias leaves every version that holds it (none,
    ``old_index``, or one a concurrent opener pointed it to) as it joins ``new_index``, so it
    never ends on two indices (two write indices are an error). A ``remove`` whose indices do
    not hold the alias is skipped (no ``must_exist``: OpenSearch < 2.12 does not know it);
    the request fails only if no action applies, and the ``add`` always does."""
    actions: list[dict[str, Any]] = [{"remove": {"index": f"{alias}-v*", "alias": alias}}]
    if old_index is not None and not re.fullmatch(rf"{re.escape(alias)}-v\d+", old_index):
        actions.append({"remove": {"index": old_index, "alias": alias}})  # set by hand
    actions.append({"add": {"index": new_index, "alias": alias, "is_write_index": True}})
    return {"actions": actions}


def splade_features(vector: SparseVector) -> dict[str, float]:
    """SPLADE weights as ``rank_features`` keys (token ids: dot-free, vocabulary-agnostic).
    ``rank_features`` only holds positive values."""
    return {str(i): float(v) for i, v in zip(vector.indices, vector.values, strict=True) if v > 0}


def chunk_source(scope: ScopeKey, write: DocumentWrite, position: int) -> dict[str, Any]:
    encoded = write.chunks[position]
    chunk = encoded.chunk
    source = {**chunk.model_dump(mode="json"), **scope_payload(scope)}
    source["content"] = source.pop("text")
    header = contextual_header(chunk.title, chunk.heading_chain)
    source["body"] = f"{header}\n{chunk.text}" if header else chunk.text
    source["content_hash"] = write.content_hash
    source["chunk_count"] = len(write.chunks)
    if encoded.splade is not None:
        source["splade"] = splade_features(encoded.splade)
    return source


def bulk_index_actions(index: str, items: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """``_bulk`` action/source pairs (upserts by the deterministic chunk id)."""
    body: list[dict[str, Any]] = []
    for chunk_id, source in items:
        body.append({"index": {"_index": index, "_id": chunk_id}})
        body.append(source)
    return body


def scope_clauses(scope: ScopeKey) -> list[dict[str, Any]]:
    """The chunks of a scope key: its tenant, and its collection."""
    clauses: list[dict[str, Any]] = [{"term": {"tenant_id": scope.tenant}}]
    if scope.collection is not None:
        clauses.append({"term": {"collection": scope.collection}})
    return clauses


def filter_clauses(
    scope: ScopeKey, filters: SearchFilters | None, doc_ids: list[str] | None = None
) -> list[dict[str, Any]]:
    clauses = scope_clauses(scope)
    if doc_ids is not None:
        clauses.append({"terms": {"doc_id": list(doc_ids)}})
    if filters is not None:
        if filters.doc_ids:
            clauses.append({"terms": {"doc_id": list(filters.doc_ids)}})
        if filters.sections:
            clauses.append({"terms": {"section.keyword": list(filters.sections)}})
        for key, value in sorted(filters.metadata.items()):
            field = f"metadata.{key}"
            clauses.append(
                {"terms": {field: list(value)}}
                if isinstance(value, list)
                else {"term": {field: value}}
            )
    return clauses


def bm25_query(
    config: OpenSearchConfig, text: str, limit: int, filters: list[dict[str, Any]]
) -> dict[str, Any]:
    """One ``multi_match`` over the boosted fields (``multi_match_type``: ``cross_fields`` is
    the BM25F-style blend of term statistics across fields)."""
    fields = [f"{name}^{boost:g}" for name, boost in config.field_boosts.items() if boost > 0]
    return {
        "size": limit,
        "_source": ["doc_id"],
        "query": {
            "bool": {
                "must": [
                    {
                        "multi_match": {
                            "query": text,
                            "fields": fields,
                            "type": config.multi_match_type,
                            "operator": "or",
                        }
                    }
                ],
                "filter": filters,
            }
        },
    }


def prune(vector: SparseVector, top_terms: int) -> list[tuple[int, float]]:
    """The query's strongest positive terms (ties broken by token id, for determinism)."""
    pairs = [(i, v) for i, v in zip(vector.indices, vector.values, strict=True) if v > 0]
    pairs.sort(key=lambda p: (-p[1], p[0]))
    return pairs[:top_terms]


def splade_query(
    config: OpenSearchConfig, vector: SparseVector, limit: int, filters: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The SPLADE dot product: each query term is a ``rank_feature`` clause whose ``linear``
    score is the document's weight, boosted by the query's weight. None when no term is left."""
    terms = prune(vector, config.splade_query_top_terms)
    if not terms:
        return None
    if config.splade_query == "neural_sparse":
        scoring: dict[str, Any] = {
            "neural_sparse": {"splade": {"query_tokens": {str(i): w for i, w in terms}}}
        }
        query: dict[str, Any] = {"bool": {"must": [scoring], "filter": filters}}
    else:
        should = [
            {"rank_feature": {"field": f"splade.{i}", "boost": w, "linear": {}}} for i, w in terms
        ]
        # With a filter present, should clauses become optional: require one term to match.
        query = {"bool": {"should": should, "minimum_should_match": 1, "filter": filters}}
    return {"size": limit, "_source": ["doc_id"], "query": query}


def hashes_query(scope: ScopeKey, doc_ids: list[str]) -> dict[str, Any]:
    """Per document: how many chunks carry each content hash, and how many there should be."""
    return {
        "size": 0,
        "query": {"bool": {"filter": filter_clauses(scope, None, doc_ids=doc_ids)}},
        "aggs": {
            "docs": {
                "terms": {"field": "doc_id", "size": max(len(doc_ids), 1)},
                "aggs": {
                    "hashes": {
                        "terms": {"field": "content_hash", "size": 4},
                        "aggs": {"expected": {"max": {"field": "chunk_count"}}},
                    }
                },
            }
        },
    }


def documents_query(scope: ScopeKey, doc_ids: list[str]) -> dict[str, Any]:
    """The chunks of these documents."""
    return {"query": {"bool": {"filter": filter_clauses(scope, None, doc_ids=doc_ids)}}}


def ids_query(scope: ScopeKey, chunk_ids: list[str]) -> dict[str, Any]:
    """These chunks (the scope's only)."""
    filters = [*filter_clauses(scope, None), {"ids": {"values": list(chunk_ids)}}]
    return {"query": {"bool": {"filter": filters}}}


def document_query(scope: ScopeKey, doc_id: str, size: int) -> dict[str, Any]:
    return {
        "size": size,
        "_source": {"excludes": ["splade", "body"]},
        "sort": ["order"],  # ascending, the default for a field sort
        "query": {"bool": {"filter": filter_clauses(scope, None, doc_ids=[doc_id])}},
    }


def heads_query(scope: ScopeKey, cursor: str | None, limit: int) -> dict[str, Any]:
    """The first chunk of each of the scope's documents, by chunk id after ``cursor``."""
    body: dict[str, Any] = {
        "size": limit,
        "_source": HEAD_FIELDS,
        "sort": ["id"],
        "query": {"bool": {"filter": [*scope_clauses(scope), {"term": {"order": 0}}]}},
    }
    if cursor is not None:
        body["search_after"] = [cursor]
    return body


def count_query(scope: ScopeKey | None) -> dict[str, Any]:
    if scope is None:
        return {"query": {"match_all": {}}}
    return {"query": {"bool": {"filter": scope_clauses(scope)}}}


def registry_body(config: OpenSearchConfig) -> dict[str, Any]:
    """The registry index: one document per named collection (``stores.registry.registry_key``)."""
    keyword = {"type": "keyword"}
    return {
        "settings": {
            "index": {"number_of_shards": 1, "number_of_replicas": config.number_of_replicas}
        },
        "mappings": {
            "dynamic": "strict",
            "properties": {field: keyword for field in ("key", "claim", *REGISTRY_RECORD_FIELDS)},
        },
    }


def registry_page(tenant_id: str | None, after: str | None, size: int) -> dict[str, Any]:
    query = {"term": {"tenant_id": tenant_id}} if tenant_id is not None else {"match_all": {}}
    body: dict[str, Any] = {"size": size, "sort": ["key"], "query": query}
    if after is not None:
        body["search_after"] = [after]
    return body


def snapshot_body(indices: list[str]) -> dict[str, Any]:
    return {
        "indices": ",".join(indices),
        "include_global_state": False,
        "ignore_unavailable": False,
    }
