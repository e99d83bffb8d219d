"""Hand-made chunks, vectors and store factories shared by the store tests."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import numpy as np
from opensearchpy import AIOHttpConnection
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError

from serve_app.config import EmbeddedStoreConfig, OpenSearchConfig, QdrantConfig
from serve_app.schemas import Chunk, SparseVector
from serve_app.stores.base import DocumentWrite, EncodedChunk, IndexModels, QueryVectors
from serve_app.stores.embedded import EmbeddedIndex
from serve_app.stores.opensearch_store import OpenSearchIndex
from serve_app.stores.qdrant_store import QdrantIndex
from serve_app.stores.split import SplitIndex

MODELS = IndexModels(dense_model="m", dense_dim=4, splade_model="s", bm25_model="b")
TOPOLOGY_NAMES = ["embedded", "qdrant", "opensearch+qdrant"]


def chunk_uuid(*parts: object) -> str:
    digest = hashlib.sha1("\x1f".join(map(str, parts)).encode()).hexdigest()
    return str(uuid.UUID(digest[:32]))


def encoded(
    doc_id: str,
    order: int,
    text: str,
    dense: list[float],
    terms: dict[int, float],
    tenant: str = "t1",
    section: str = "Intro",
    metadata: dict | None = None,
) -> EncodedChunk:
    chunk = Chunk(
        id=chunk_uuid(tenant, doc_id, order, text),
        doc_id=doc_id,
        tenant_id=tenant,
        text=text,
        title=f"title {doc_id}",
        section=section,
        heading_chain=[section],
        order=order,
        char_start=0,
        char_end=len(text),
        metadata=metadata or {},
    )
    sparse = SparseVector(indices=list(terms), values=list(terms.values()))
    return EncodedChunk(
        chunk=chunk, dense=np.array(dense, dtype=np.float32), splade=sparse, bm25=sparse
    )


def write(doc_id: str, chunks: list[EncodedChunk], content_hash: str = "h1") -> DocumentWrite:
    return DocumentWrite(doc_id=doc_id, content_hash=content_hash, chunks=chunks)


def query(dense=(1, 0, 0, 0), terms=None, text: str = "q") -> QueryVectors:
    terms = terms or {1: 1.0}
    sparse = SparseVector(indices=list(terms), values=list(terms.values()))
    return QueryVectors(
        text=text, dense=np.array(dense, dtype=np.float32), splade=sparse, bm25=sparse
    )


def opensearch_config(url: str, **overrides) -> OpenSearchConfig:
    values = {
        "hosts": [url],
        "index": f"chunks-{uuid.uuid4().hex[:8]}",
        "number_of_replicas": 0,
        "max_retries": 1,
        "retry_backoff_s": 0.01,
        **overrides,
    }
    return OpenSearchConfig(**values)


def make_store(
    topology: str,
    tmp_path: Path,
    opensearch_url: str | None = None,
    qdrant_local: str = ":memory:",
    collection: str = "chunks",
    os_config: OpenSearchConfig | None = None,
    migrate: bool = False,
):
    """A store of each topology on real engines: qdrant-edge, qdrant-client local mode, and
    the OpenSearch REST server given by ``opensearch_url``."""
    qdrant = QdrantConfig(local_path=qdrant_local, collection=collection, exact=True)
    if topology == "embedded":
        return EmbeddedIndex(tmp_path / "embedded", EmbeddedStoreConfig(exact=True))
    if topology == "qdrant":
        return QdrantIndex(qdrant, tmp_path, migrate=migrate)
    if topology == "opensearch+qdrant":
        assert opensearch_url is not None
        return SplitIndex(
            OpenSearchIndex(os_config or opensearch_config(opensearch_url), migrate=migrate),
            QdrantIndex(qdrant, tmp_path, strategies=("dense",), migrate=migrate),
        )
    raise ValueError(topology)


class FlakyConnection(AIOHttpConnection):
    """An injected transport error at the client boundary: fails ``_bulk`` requests after
    ``bulk_budget`` of them (then everything, if ``down_after_bulk_failure``), or every request
    while ``down``."""

    bulk_budget: int | None = None
    down = False

    async def perform_request(self, method, url, params=None, body=None, *args, **kwargs):
        cls = type(self)
        if cls.down:
            raise OpenSearchConnectionError("N/A", "injected: OpenSearch down", None)
        if "_bulk" in url and cls.bulk_budget is not None:
            if cls.bulk_budget == 0:
                cls.down = cls.down_after_bulk_failure
                raise OpenSearchConnectionError("N/A", "injected: connection reset", None)
            cls.bulk_budget -= 1
        return await super().perform_request(method, url, params, body, *args, **kwargs)

    down_after_bulk_failure = False
