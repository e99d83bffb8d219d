"""Readings of stored chunk payloads that every backend shares: a document's info, the
document states of the write algorithm, a payload sample for inspection."""

from __future__ import annotations

from typing import Any

from serve_app.schemas import DEFAULT_COLLECTION, DocumentInfo, DocumentSummary, ScopeKey
from serve_app.stores.values import DocumentStates


def document_metadata(payload: dict[str, Any]) -> dict[str, Any]:
    # imrad labels are per chunk (set by the chunker), not document metadata.
    return {k: v for k, v in payload.get("metadata", {}).items() if k != "imrad"}


def document_info_from(
    scope: ScopeKey, doc_id: str, payloads: list[dict[str, Any]]
) -> DocumentInfo | None:
    """A document's info from its stored chunk payloads (any order); None when there are none."""
    if not payloads:
        return None
    ordered = sorted(payloads, key=lambda p: p["order"])
    first = ordered[0]
    return DocumentInfo(
        id=doc_id,
        tenant_id=scope.tenant,
        collection=scope.collection or DEFAULT_COLLECTION,
        title=first.get("title", ""),
        metadata=document_metadata(first),
        source=first.get("source"),
        content_hash=first["content_hash"],
        chunk_ids=[p["id"] for p in ordered],
    )


HEAD_FIELDS = ["doc_id", "title", "source", "metadata", "content_hash", "chunk_count"]
"""What a document's list line reads from its first chunk's payload."""


def summary_from(head: dict[str, Any]) -> DocumentSummary:
    """A document's list line from its first chunk's payload (``HEAD_FIELDS``)."""
    return DocumentSummary(
        id=head["doc_id"],
        title=head.get("title", ""),
        source=head.get("source"),
        metadata=document_metadata(head),
        content_hash=head["content_hash"],
        chunk_count=int(head["chunk_count"]),
    )


def states_from_payloads(payloads: list[dict[str, Any]]) -> DocumentStates:
    """Document states from chunk payloads carrying doc_id, content_hash and chunk_count."""
    seen: dict[str, dict[str, list[int]]] = {}
    for payload in payloads:
        per_hash = seen.setdefault(payload["doc_id"], {})
        per_hash.setdefault(payload["content_hash"], []).append(int(payload["chunk_count"]))
    return {
        doc: (h, len(counts), max(counts))
        for doc, hashes in seen.items()
        if len(hashes) == 1
        for h, counts in hashes.items()
    }


def sample_payload(payload: dict[str, Any], max_chars: int = 80) -> dict[str, Any]:
    """A stored payload for display: long strings cut, large maps and lists summarised."""
    out: dict[str, Any] = {}
    for key, value in sorted(payload.items()):
        if isinstance(value, str) and len(value) > max_chars:
            value = value[:max_chars] + "..."
        elif isinstance(value, dict) and len(value) > 8:
            value = f"<{len(value)} entries>"
        elif isinstance(value, list) and len(value) > 8:
            value = f"<{len(value)} items>"
        out[key] = value
    return out
