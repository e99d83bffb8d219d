"""Ingest: validate -> chunk -> encode (dense and sparse concurrently) -> write.

All-or-nothing per call: every document is validated, chunked and encoded before the first
write, so bad input never leaves a half-written index. Documents whose content hash (which
includes the chunker and model fingerprint) is unchanged are skipped with no model work.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from serve_app.chunking.base import contextual_header, document_hash, stored_chunk_id
from serve_app.errors import InvalidInputError, PayloadTooLargeError
from serve_app.pipelines.components import Components
from serve_app.pipelines.timing import StageTimer
from serve_app.schemas import Chunk, Document, IngestResult, ScopeKey
from serve_app.stores.base import DocumentWrite, EncodedChunk


def encoding_text(chunk: Chunk, with_header: bool) -> str:
    """What the encoders see: the contextual header (title, headings) then the chunk text."""
    if not with_header:
        return chunk.text
    header = contextual_header(chunk.title, chunk.heading_chain)
    return f"{header}\n{chunk.text}" if header else chunk.text


@dataclass
class ChunkBudget:
    """The chunks one request may make (``limits.max_chunks_per_request``); each of its
    sub-batches draws on it after chunking, before encoding."""

    limit: int
    used: int = 0

    def draw(self, count: int, max_tokens: int) -> None:
        if self.used + count > self.limit:
            error = PayloadTooLargeError(
                f"this request makes more than {self.limit} chunks ({self.used + count} so "
                f"far, up to {max_tokens} tokens each to encode), over the limit of "
                f"{self.limit} (limits.max_chunks_per_request); send fewer documents a request",
                details={"chunks": self.used + count, "limit": self.limit},
            )
            raise error
        self.used += count


def bm25_text(chunk: Chunk, with_header: bool, title_weight: int) -> str:
    """What BM25 indexes: ``encoding_text`` with the header ``title_weight`` times, so header
    terms count that many times in the chunk's term frequencies and length (BM25F)."""
    header = contextual_header(chunk.title, chunk.heading_chain) if with_header else ""
    if title_weight == 1 or not header:
        return encoding_text(chunk, with_header)
    return "\n".join([header] * title_weight + [chunk.text])


class IngestPipeline:
    def __init__(self, components: Components) -> None:
        self.components = components
        self.config = components.config
        self._fingerprint = components.fingerprint()

    def validate(self, documents: list[Document]) -> None:
        limits = self.config.limits
        if not documents:
            raise InvalidInputError("no documents to ingest")
        if len(documents) > limits.max_documents_per_request:
            raise PayloadTooLargeError(
                f"{len(documents)} documents in one request, over the limit of "
                f"{limits.max_documents_per_request} (limits.max_documents_per_request)"
            )
        seen: set[str] = set()
        for document in documents:
            if document.id in seen:
                raise InvalidInputError(f"document id {document.id!r} appears twice in one request")
            seen.add(document.id)
            size = document.char_count()
            if size > limits.max_document_chars:
                raise PayloadTooLargeError(
                    f"document {document.id!r} has {size} characters, over the limit of "
                    f"{limits.max_document_chars} (limits.max_document_chars)"
                )
            repeated = document.repeated_chars()
            if repeated > limits.max_repeated_chars:
                raise PayloadTooLargeError(
                    f"document {document.id!r}: its title, headings, source and metadata come "
                    f"to {repeated} characters, which every chunk repeats; over the limit of "
                    f"{limits.max_repeated_chars} (limits.max_repeated_chars)"
                )

    async def ingest(
        self, scope: ScopeKey, documents: list[Document], budget: ChunkBudget | None = None
    ) -> IngestResult:
        """Index ``documents`` into ``scope``; ``budget`` is the request's chunk allowance
        when this is one sub-batch of a larger request."""
        self.validate(documents)
        timer = StageTimer()
        started = time.perf_counter()
        result = IngestResult(documents=len(documents))
        hashes = {d.id: document_hash(d, self._fingerprint) for d in documents}
        existing = await self.components.index.document_hashes(scope, list(hashes))
        changed = []
        for d in documents:
            if existing.get(d.id) == hashes[d.id]:
                result.unchanged.append(d.id)
            else:
                changed.append((d, hashes[d.id]))

        if not changed:
            timer.record("total", started)
            result.timings_ms = timer.timings_ms
            return result
        writes = await self.build_writes(scope, changed, timer, budget)

        # Only now, with everything encoded, does anything touch the store.
        write_start = time.perf_counter()
        result.stale_chunks_removed += await self.components.index.write_documents(scope, writes)
        result.written.extend(w.doc_id for w in writes)
        result.chunks_written += sum(len(w.chunks) for w in writes)
        timer.record("write", write_start)
        timer.record("total", started)
        result.timings_ms = timer.timings_ms
        return result

    async def build_writes(
        self,
        scope: ScopeKey,
        documents: list[tuple[Document, str]],
        timer: StageTimer | None = None,
        budget: ChunkBudget | None = None,
    ) -> list[DocumentWrite]:
        """Chunk and encode documents (with their content hashes) into writes to ``scope``.
        Nothing touches the store. The chunk limits are checked between chunking and
        encoding (PayloadTooLargeError)."""
        timer = timer or StageTimer()
        docs = [d for d, _ in documents]
        per_doc = await timer.run("chunk", self.components.chunker.chunk_many, docs)
        self._check_chunk_counts(docs, per_doc, budget)
        encoded = await self._encode([c for chunks in per_doc for c in chunks], timer)
        writes: list[DocumentWrite] = []
        position = 0
        for (document, content_hash), chunks in zip(documents, per_doc, strict=True):
            part = encoded[position : position + len(chunks)]
            position += len(chunks)
            for item in part:
                item.chunk = item.chunk.model_copy(
                    update={"id": stored_chunk_id(scope, item.chunk.id, content_hash)}
                )
            writes.append(DocumentWrite(document.id, content_hash, part))
        return writes

    def _check_chunk_counts(
        self, docs: list[Document], per_doc: list[list[Chunk]], budget: ChunkBudget | None
    ) -> None:
        limits, max_tokens = self.config.limits, self.config.chunker.max_tokens
        for document, chunks in zip(docs, per_doc, strict=True):
            if len(chunks) > limits.max_chunks_per_document:
                error = PayloadTooLargeError(
                    f"document {document.id!r} makes {len(chunks)} chunks (up to {max_tokens} "
                    f"tokens each to encode), over the limit of "
                    f"{limits.max_chunks_per_document} (limits.max_chunks_per_document)",
                    details={
                        "document": document.id,
                        "chunks": len(chunks),
                        "limit": limits.max_chunks_per_document,
                    },
                )
                raise error
        (budget or ChunkBudget(limits.max_chunks_per_request)).draw(
            sum(len(c) for c in per_doc), max_tokens
        )

    async def _encode(self, chunks: list[Chunk], timer: StageTimer) -> list[EncodedChunk]:
        with_header = self.config.chunker.contextual_header
        texts = [encoding_text(c, with_header) for c in chunks]
        title_weight = self.config.bm25.title_weight
        bm25_texts = (
            texts
            if title_weight == 1
            else [bm25_text(c, with_header, title_weight) for c in chunks]
        )
        sparse = self.components.sparse
        names = list(sparse)
        outputs = await asyncio.gather(
            timer.run("encode.dense", self.components.dense.embed_documents, texts),
            *(
                timer.run(
                    f"encode.{n}", sparse[n].encode_documents, bm25_texts if n == "bm25" else texts
                )
                for n in names
            ),
        )
        dense, sparse_out = outputs[0], dict(zip(names, outputs[1:], strict=True))
        return [
            EncodedChunk(
                chunk=chunk,
                dense=dense[i],
                splade=sparse_out["splade"][i] if "splade" in sparse_out else None,
                bm25=sparse_out["bm25"][i] if "bm25" in sparse_out else None,
            )
            for i, chunk in enumerate(chunks)
        ]

    async def delete(self, scope: ScopeKey, doc_id: str) -> int:
        return await self.components.index.delete_document(scope, doc_id)
