"""The chunker interface and what every chunker shares: canonical text, ids, provenance."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from serve_app.catalog import Catalog
from serve_app.schemas import Chunk, Document

if TYPE_CHECKING:
    from serve_app.schemas import ScopeKey

BLOCK_SEPARATOR = "\n\n"
_CHUNK_NAMESPACE = uuid.UUID("6f1f5b9e-3c1a-4f59-9a53-0d6c8f6f2a10")


@runtime_checkable
class Chunker(Protocol):
    """Splits documents into chunks; deterministic (same input, same chunks and ids).

    ``chunk_many`` is what pipelines call (a Ray Serve handle implements it remotely);
    ``fingerprint`` describes the settings that shape the chunks (part of content hashes).
    """

    name: str

    async def chunk_many(self, documents: list[Document]) -> list[list[Chunk]]: ...

    def fingerprint(self) -> dict: ...


CHUNKERS: Catalog[Chunker] = Catalog("chunker", "chunker.name")
CHUNKERS.register_lazy("sliding_window", "serve_app.chunking.sliding_window:build")
CHUNKERS.register_lazy("sections", "serve_app.chunking.sections:build")
CHUNKERS.register_lazy("imrad", "serve_app.chunking.imrad:build")


@dataclass(frozen=True)
class Block:
    """A run of body text with its heading chain and its span in the canonical text."""

    chain: tuple[str, ...]
    start: int
    end: int


def canonical_text(document: Document) -> tuple[str, list[Block]]:
    """The document's body blocks joined by a blank line, with each block's span.

    Chunk offsets index into this string, so a chunk's text is always
    ``canonical[chunk.char_start:chunk.char_end]``.
    """
    parts: list[str] = []
    blocks: list[Block] = []
    position = 0
    for chain, text in document.iter_blocks():
        body = text.strip()
        if not body:
            continue
        if parts:
            position += len(BLOCK_SEPARATOR)
        blocks.append(Block(chain=chain, start=position, end=position + len(body)))
        parts.append(body)
        position += len(body)
    return BLOCK_SEPARATOR.join(parts), blocks


def chunk_id(doc_id: str, order: int, text: str) -> str:
    """Deterministic UUID (Qdrant point ids must be UUIDs or integers) of a chunk within its
    document; the id it is stored under adds the scope and version (``stored_chunk_id``)."""
    digest = hashlib.sha1(text.encode()).hexdigest()
    return str(uuid.uuid5(_CHUNK_NAMESPACE, f"{doc_id}\x1f{order}\x1f{digest}"))


def stored_chunk_id(scope: ScopeKey, chunk_id_: str, content_hash: str) -> str:
    """The id a chunk is stored under. The scope is part of it: the same document in two
    collections (or tenants) shares no chunk. So is the version: two versions share no
    stored chunk and replacing one by the other can be undone exactly (stores/index/writes.py);
    the same content gives the same ids (re-ingest stays idempotent)."""
    return str(uuid.uuid5(_CHUNK_NAMESPACE, f"{scope}\x1f{chunk_id_}\x1f{content_hash}"))


def document_hash(document: Document, fingerprint: dict | None = None) -> str:
    """Content hash of a document plus whatever shapes its chunks and vectors."""
    payload = document.model_dump(mode="json")
    blob = json.dumps([payload, fingerprint or {}], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def contextual_header(title: str, chain: tuple[str, ...] | list[str]) -> str:
    """The header prepended to a chunk when it is encoded (title and heading chain)."""
    return "\n".join(part for part in (title, " > ".join(chain)) if part)


def block_at(blocks: list[Block], position: int) -> Block:
    """The block containing ``position`` (or the nearest one before it)."""
    found = blocks[0]
    for block in blocks:
        if block.start <= position:
            found = block
        else:
            break
    return found


def make_chunks(
    document: Document,
    canonical: str,
    spans: list[tuple[int, int, tuple[str, ...], dict]],
) -> list[Chunk]:
    """Chunks for (start, end, heading chain, extra metadata) spans, ordered as given."""
    chunks: list[Chunk] = []
    for order, (start, end, chain, extra) in enumerate(spans):
        text = canonical[start:end]
        chunks.append(
            Chunk(
                id=chunk_id(document.id, order, text),
                doc_id=document.id,
                text=text,
                title=document.title,
                section=chain[0] if chain else "",
                heading_chain=list(chain),
                order=order,
                char_start=start,
                char_end=end,
                metadata={**document.metadata, **extra},
                source=document.source,
            )
        )
    return chunks
