"""DeploymentHandle adapters behind serve_app's protocols, so the pipelines run unchanged.

Ray failures (a replica dead or unreachable, back-pressure) become ServiceUnavailableError at
this boundary; a library error raised inside a deployment keeps its type and API code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import numpy as np
from ray import exceptions as ray_exceptions
from ray.serve import exceptions as serve_exceptions
from ray.serve.handle import DeploymentHandle

from serve_app.errors import ServeAppError, ServiceUnavailableError
from serve_app.schemas import Chunk, Document, DocumentInfo, SearchFilters, SparseVector, Strategy
from serve_app.stores.base import DocumentWrite, Hit, IndexModels, QueryVectors

T = TypeVar("T")
BatchObserver = Callable[[str, dict], None]

_UNAVAILABLE = (
    ray_exceptions.RayActorError,
    ray_exceptions.ActorUnavailableError,
    ray_exceptions.RaySystemError,
    serve_exceptions.BackPressureError,
    serve_exceptions.DeploymentUnavailableError,
    serve_exceptions.RayServeException,
)


async def call(deployment: str, awaitable: Awaitable[T]) -> T:
    try:
        return await awaitable
    except ray_exceptions.RayTaskError as error:
        cause = getattr(error, "cause", None)
        if isinstance(cause, ServeAppError):
            raise cause from None
        raise ServiceUnavailableError(
            f"{deployment} deployment failed: {type(cause).__name__}"
        ) from None
    except ServeAppError:
        raise
    except _UNAVAILABLE as error:
        raise ServiceUnavailableError(
            f"{deployment} deployment unavailable: {type(error).__name__}"
        ) from None


def _ignore(_: str, __: dict) -> None:
    return None


class RemoteDenseEncoder:
    def __init__(
        self, handle: DeploymentHandle, info: dict[str, Any], observe: BatchObserver = _ignore
    ) -> None:
        self.handle = handle
        self.model_id = info["model_id"]
        self.dim = int(info["dim"])
        self.observe = observe

    async def _embed(self, mode: str, texts: list[str]) -> np.ndarray:
        vectors, stats = await call("dense", self.handle.embed.remote(mode, texts))
        self.observe("dense", stats)
        return vectors

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return await self._embed("document", texts)

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        return await self._embed("query", texts)


class RemoteSparseEncoder:
    def __init__(
        self, handle: DeploymentHandle, info: dict[str, Any], observe: BatchObserver = _ignore
    ) -> None:
        self.handle = handle
        self.model_id = info["model_id"]
        self.observe = observe

    async def _encode(self, mode: str, texts: list[str]) -> list[SparseVector]:
        vectors, stats = await call("splade", self.handle.encode.remote(mode, texts))
        self.observe("splade", stats)
        return vectors

    async def encode_documents(self, texts: list[str]) -> list[SparseVector]:
        return await self._encode("document", texts)

    async def encode_queries(self, texts: list[str]) -> list[SparseVector]:
        return await self._encode("query", texts)


class RemoteReranker:
    def __init__(
        self, handle: DeploymentHandle, info: dict[str, Any], observe: BatchObserver = _ignore
    ) -> None:
        self.handle = handle
        self.model_id = info["model_id"]
        self.observe = observe

    async def score(self, query: str, passages: list[str]) -> list[float]:
        scores, stats = await call("reranker", self.handle.score.remote(query, passages))
        self.observe("reranker", stats)
        return scores


class RemoteChunker:
    name = "remote"

    def __init__(self, handle: DeploymentHandle, fingerprint: dict) -> None:
        self.handle = handle
        self._fingerprint = fingerprint
        self.name = fingerprint.get("chunker", "remote")

    def fingerprint(self) -> dict:
        return self._fingerprint

    async def chunk_many(self, documents: list[Document]) -> list[list[Chunk]]:
        return await call("chunker", self.handle.chunk_many.remote(documents))


class RemoteIndex:
    """The ChunkIndex protocol over the store-owner deployment."""

    strategies: tuple[Strategy, ...] = ("bm25", "splade", "dense")

    def __init__(self, handle: DeploymentHandle) -> None:
        self.handle = handle

    async def open(self, models: IndexModels) -> None:
        await call("store", self.handle.open.remote(models))

    async def write_documents(self, tenant_id: str, writes: list[DocumentWrite]) -> int:
        return await call("store", self.handle.write_documents.remote(tenant_id, writes))

    async def delete_document(self, tenant_id: str, doc_id: str) -> int:
        return await call("store", self.handle.delete_document.remote(tenant_id, doc_id))

    async def document_hashes(self, tenant_id: str, doc_ids: list[str]) -> dict[str, str]:
        return await call("store", self.handle.document_hashes.remote(tenant_id, doc_ids))

    async def document_info(self, tenant_id: str, doc_id: str) -> DocumentInfo | None:
        return await call("store", self.handle.document_info.remote(tenant_id, doc_id))

    async def search(
        self,
        strategy: Strategy,
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None = None,
    ) -> list[Hit]:
        return await call(
            "store", self.handle.search.remote(strategy, query, limit, tenant_id, filters)
        )

    async def search_many(
        self,
        strategies: list[Strategy],
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[Hit]]:
        remote = self.handle.search_many.remote(strategies, query, limit, tenant_id, filters)
        return await call("store", remote)

    async def fetch(self, tenant_id: str, chunk_ids: list[str]) -> list[Chunk]:
        return await call("store", self.handle.fetch.remote(tenant_id, chunk_ids))

    async def count(self, tenant_id: str | None = None) -> int:
        return await call("store", self.handle.count.remote(tenant_id))

    async def healthy(self) -> bool:
        return await call("store", self.handle.healthy.remote())

    async def close(self) -> None:
        """The store deployment owns the index and closes it itself."""
