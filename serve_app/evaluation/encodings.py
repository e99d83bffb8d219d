"""Chunked and encoded corpora for tuning, cached per text so settings share model work.

Encoding SciFact's 5,183 abstracts takes minutes per model on a CPU, and most tuning settings
(fusion, BM25 parameters, aggregation, query pruning) need no new vectors. Vectors are cached
on disk per model setting (model, max length, pooling; SPLADE pruning) and per encoded text,
so two chunkings that produce the same chunk text (a 512-token chunking with 32 or 64 tokens of
overlap differs only on documents longer than 512 tokens) encode it once.

The chunks are the real chunker's and the encoded text is what ingest encodes
(``serve_app.pipelines.ingest.encoding_text``); BM25 keeps per-field term counts (header and
chunk body) from the engine's own tokenizer, so BM25 parameters and field weights are set
afterwards without touching a model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from serve_app.chunking.base import contextual_header
from serve_app.config import AppConfig
from serve_app.encoders.bm25 import term_counts
from serve_app.evaluation.beir import BeirDataset
from serve_app.pipelines.ingest import encoding_text
from serve_app.schemas import SparseVector

log = logging.getLogger(__name__)

PLURAL = {"document": "documents", "query": "queries"}
QUERY_SPLADE_TOP_K = 256
"""Query vectors are cached with this many terms; any smaller pruning is a prefix of them."""


@dataclass
class SparseMatrix:
    """Rows of sparse vectors in CSR form (``indptr``, term ``indices``, ``values``)."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray

    @classmethod
    def from_vectors(cls, vectors: list[SparseVector]) -> SparseMatrix:
        lengths = [len(v.indices) for v in vectors]
        indptr = np.zeros(len(vectors) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        indices = np.fromiter((i for v in vectors for i in v.indices), np.int64, indptr[-1])
        values = np.fromiter((x for v in vectors for x in v.values), np.float32, indptr[-1])
        return cls(indptr, indices, values)

    @classmethod
    def from_rows(cls, rows: list[dict[int, float]]) -> SparseMatrix:
        return cls.from_vectors(
            [SparseVector.model_construct(indices=list(r), values=list(r.values())) for r in rows]
        )

    @property
    def rows(self) -> int:
        return len(self.indptr) - 1

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        start, end = self.indptr[i], self.indptr[i + 1]
        return self.indices[start:end], self.values[start:end]

    def take(self, rows: list[int]) -> SparseMatrix:
        parts = [self.row(i) for i in rows]
        lengths = [len(p[0]) for p in parts]
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        if not parts:
            return SparseMatrix(indptr, np.zeros(0, np.int64), np.zeros(0, np.float32))
        return SparseMatrix(
            indptr,
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]).astype(np.float32),
        )


def _text_key(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


class VectorCache:
    """Vectors of one model setting, by text, in ``folder`` (``keys.json`` + arrays)."""

    def __init__(self, folder: Path, setting: dict, sparse: bool) -> None:
        name = hashlib.sha1(json.dumps(setting, sort_keys=True).encode()).hexdigest()[:16]
        self.folder = folder / name
        self.setting = setting
        self.sparse = sparse
        self.rows: dict[str, int] = {}
        self.dense: np.ndarray | None = None
        self.splade: list[SparseVector] = []
        if (self.folder / "keys.json").is_file():
            keys = json.loads((self.folder / "keys.json").read_text())
            self.rows = {k: i for i, k in enumerate(keys)}
            if sparse:
                m = np.load(self.folder / "splade.npz")
                matrix = SparseMatrix(m["indptr"], m["indices"], m["values"])
                self.splade = [
                    SparseVector.model_construct(
                        indices=matrix.row(i)[0].tolist(), values=matrix.row(i)[1].tolist()
                    )
                    for i in range(matrix.rows)
                ]
            else:
                self.dense = np.load(self.folder / "dense.npy")

    def missing(self, texts: list[str]) -> list[str]:
        seen: set[str] = set()
        out = []
        for text in texts:
            key = _text_key(text)
            if key not in self.rows and key not in seen:
                seen.add(key)
                out.append(text)
        return out

    def add(self, texts: list[str], vectors: np.ndarray | list[SparseVector]) -> None:
        for text in texts:
            self.rows[_text_key(text)] = len(self.rows)
        if self.sparse:
            assert isinstance(vectors, list)
            self.splade.extend(vectors)
        else:
            assert isinstance(vectors, np.ndarray)
            self.dense = vectors if self.dense is None else np.vstack([self.dense, vectors])
        self.save()

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "setting.json").write_text(json.dumps(self.setting, indent=2))
        if self.sparse:
            m = SparseMatrix.from_vectors(self.splade)
            np.savez(
                self.folder / "splade.npz", indptr=m.indptr, indices=m.indices, values=m.values
            )
        else:
            assert self.dense is not None
            np.save(self.folder / "dense.npy", self.dense)
        keys = sorted(self.rows, key=self.rows.__getitem__)
        (self.folder / "keys.json").write_text(json.dumps(keys))

    def dense_rows(self, texts: list[str]) -> np.ndarray:
        assert self.dense is not None
        return self.dense[[self.rows[_text_key(t)] for t in texts]]

    def sparse_rows(self, texts: list[str]) -> SparseMatrix:
        return SparseMatrix.from_vectors([self.splade[self.rows[_text_key(t)]] for t in texts])


def fill(
    cache: VectorCache,
    texts: list[str],
    encode: Callable[[list[str]], np.ndarray | list[SparseVector]],
    what: str,
    batch: int = 512,
) -> None:
    """Encode the texts the cache lacks, ``batch`` at a time (saved after each batch)."""
    todo = cache.missing(texts)
    started = time.perf_counter()
    for start in range(0, len(todo), batch):
        part = todo[start : start + batch]
        cache.add(part, encode(part))
        done = start + len(part)
        rate = done / max(time.perf_counter() - started, 1e-9)
        log.info("%s: %d/%d encoded (%.1f texts/s)", what, done, len(todo), rate)


class NotEncoded(LookupError):
    """Vectors the cache lacks, asked for where encoding is not allowed."""


class Encoded:
    """Texts with their dense and SPLADE vectors, each encoded (or read from the cache) the
    first time it is asked for: a tuning stage that uses BM25 alone runs no model. With
    ``encode`` False, vectors the cache lacks raise ``NotEncoded`` instead."""

    def __init__(
        self,
        config: AppConfig,
        texts: list[str],
        side: str,
        cache_root: Path,
        encode: bool = True,
    ) -> None:
        self.config = config
        self.texts = texts
        self.side = side
        self.cache_root = cache_root
        self.encode = encode
        self._dense: np.ndarray | None = None
        self._splade: SparseMatrix | None = None

    @property
    def dense(self) -> np.ndarray:
        if self._dense is None:
            from serve_app.encoders.base import DENSE_BACKENDS

            cache = VectorCache(self.cache_root, dense_setting(self.config, self.side), False)
            self._check(cache, "dense")
            if cache.missing(self.texts):
                model = DENSE_BACKENDS.create(self.config.dense.backend, self.config.dense)
                encode = model.encode if self.side == "document" else model.encode_queries_sync
                try:
                    fill(cache, self.texts, encode, f"dense {PLURAL[self.side]}")
                finally:
                    model.close()
            self._dense = cache.dense_rows(self.texts)
        return self._dense

    @property
    def splade(self) -> SparseMatrix:
        if self._splade is None:
            from serve_app.encoders.splade import SpladeEncoder

            setting = splade_setting(self.config, self.side)
            cache = VectorCache(self.cache_root, setting, True)
            self._check(cache, "splade")
            if cache.missing(self.texts):
                model = SpladeEncoder(self.config.splade)
                try:
                    fill(
                        cache,
                        self.texts,
                        lambda t: model.encode(t, setting["top_k"]),
                        f"splade {PLURAL[self.side]}",
                    )
                finally:
                    model.close()
            self._splade = cache.sparse_rows(self.texts)
        return self._splade

    def _check(self, cache: VectorCache, model: str) -> None:
        missing = len(cache.missing(self.texts))
        if missing and not self.encode:
            raise NotEncoded(
                f"{model} {self.side} vectors at {self.config.dense.max_length if model == 'dense' else self.config.splade.max_length}"
                f" tokens: {missing} of {len(self.texts)} texts not encoded"
            )


@dataclass
class EncodedCorpus:
    """One chunking of a corpus with every strategy's document-side representation."""

    chunking: dict
    doc_ids: list[str]  # per chunk
    orders: list[int]  # each chunk's position in its document
    vectors: Encoded
    title_counts: list[dict[int, int]]  # BM25 term counts of the contextual header
    body_counts: list[dict[int, int]]  # BM25 term counts of the chunk text

    @property
    def dense(self) -> np.ndarray:  # (chunks, dim), L2-normalised
        return self.vectors.dense

    @property
    def splade(self) -> SparseMatrix:
        return self.vectors.splade


@dataclass
class EncodedQueries:
    ids: list[str]
    texts: list[str]
    vectors: Encoded  # SPLADE with QUERY_SPLADE_TOP_K terms, largest first

    @property
    def dense(self) -> np.ndarray:
        return self.vectors.dense

    @property
    def splade(self) -> SparseMatrix:
        return self.vectors.splade


def dense_setting(config: AppConfig, side: str) -> dict:
    return {
        "side": side,
        **config.dense.model_dump(
            include={"model", "pooling", "max_length", "append_token", "output_dim", "normalize"}
        ),
        **(
            {"query_instruction": config.dense.query_instruction, "t": config.dense.query_template}
            if side == "query"
            else {}
        ),
    }


def splade_setting(config: AppConfig, side: str) -> dict:
    top_k = config.splade.doc_top_k if side == "document" else QUERY_SPLADE_TOP_K
    return {
        "side": side,
        "top_k": top_k,
        **config.splade.model_dump(include={"model", "max_length", "min_weight"}),
    }


def chunk_corpus(config: AppConfig, dataset: BeirDataset, cache_root: Path) -> list[dict]:
    """The corpus's chunks under ``config.chunker`` (doc id, order, header, text), cached on
    disk per chunker setting and corpus (sentence splitting 5,000 abstracts takes minutes)."""
    from serve_app.pipelines.components import build_chunker

    chunker = build_chunker(config)
    corpus_key = hashlib.sha1()
    for document in dataset.corpus:
        corpus_key.update(f"{document.id}\x00{document.title}\x00{document.text}\x01".encode())
    setting = {
        "chunker": chunker.fingerprint(),
        "tokenizer": config.chunker.tokenizer or config.dense.model,
        "corpus": corpus_key.hexdigest(),
    }
    name = hashlib.sha1(json.dumps(setting, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_root / "chunks" / f"{name}.json"
    if path.is_file():
        return json.loads(path.read_text())
    with_header = config.chunker.contextual_header
    rows = [
        {
            "doc_id": c.doc_id,
            "order": c.order,
            "header": contextual_header(c.title, c.heading_chain) if with_header else "",
            "text": c.text,
            "encoded": encoding_text(c, with_header),
        }
        for chunks in chunker.chunk_batch(dataset.corpus)  # type: ignore[attr-defined]
        for c in chunks
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))
    return rows


def encode_corpus(
    config: AppConfig, dataset: BeirDataset, cache_root: Path, encode: bool = True
) -> EncodedCorpus:
    """``dataset.corpus`` chunked with ``config.chunker``; vectors encoded (cached) when used
    (``encode`` False: only what the cache holds)."""
    chunks = chunk_corpus(config, dataset, cache_root)
    language = config.bm25.language
    return EncodedCorpus(
        chunking=config.chunker.model_dump(include={"name", "max_tokens", "overlap_tokens"}),
        doc_ids=[c["doc_id"] for c in chunks],
        orders=[c["order"] for c in chunks],
        vectors=Encoded(config, [c["encoded"] for c in chunks], "document", cache_root, encode),
        title_counts=[term_counts(c["header"], language) for c in chunks],
        body_counts=[term_counts(c["text"], language) for c in chunks],
    )


def encode_queries(config: AppConfig, queries: dict[str, str], cache_root: Path) -> EncodedQueries:
    """``queries`` in id order; vectors encoded (cached) when used."""
    ids = sorted(queries)
    texts = [queries[q] for q in ids]
    return EncodedQueries(ids=ids, texts=texts, vectors=Encoded(config, texts, "query", cache_root))


class CachedDocuments:
    """An encoder whose document side reads ``cache`` (texts it lacks go to ``inner``), the
    query side always ``inner``: an eval re-indexing a corpus the tuner already encoded with
    the same model setting skips the model, and every query is encoded live as in a search.
    Nothing is written to the cache here."""

    def __init__(self, inner, cache: VectorCache) -> None:
        self.inner = inner
        self.cache = cache
        self.model_id = inner.model_id
        self.hits = 0

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    async def _documents(self, texts: list[str], encode):
        missing = set(self.cache.missing(texts))
        fresh = iter(await encode([t for t in texts if t in missing]) if missing else [])
        self.hits += len(texts) - len(missing)
        out = []
        for text in texts:
            out.append(next(fresh) if text in missing else self._cached(text))
        return out

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return np.asarray(await self._documents(texts, self.inner.embed_documents), np.float32)

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        return await self.inner.embed_queries(texts)

    async def encode_documents(self, texts: list[str]) -> list[SparseVector]:
        return await self._documents(texts, self.inner.encode_documents)

    async def encode_queries(self, texts: list[str]) -> list[SparseVector]:
        return await self.inner.encode_queries(texts)

    def _cached(self, text: str):
        if not self.cache.sparse:
            return self.cache.dense_rows([text])[0]
        vector = self.cache.splade[self.cache.rows[_text_key(text)]]
        vocab = getattr(self.inner, "_vocab", None)
        terms = None if vocab is None else vocab[vector.indices].tolist()
        return SparseVector.model_construct(
            indices=vector.indices, values=vector.values, terms=terms
        )


def reuse_document_encodings(components, cache_root: Path) -> tuple[CachedDocuments, ...]:
    """Wrap the components' dense and SPLADE encoders with their settings' caches."""
    config = components.config
    wrapped = [
        CachedDocuments(
            components.dense,
            VectorCache(cache_root, dense_setting(config, "document"), sparse=False),
        )
    ]
    components.dense = wrapped[0]
    if "splade" in components.sparse:
        splade = CachedDocuments(
            components.sparse["splade"],
            VectorCache(cache_root, splade_setting(config, "document"), sparse=True),
        )
        components.sparse["splade"] = splade
        wrapped.append(splade)
    return tuple(wrapped)
