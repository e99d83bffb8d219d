"""The store deployment: a replica opens the configured topology itself and serves the
``ChunkIndex`` protocol (one method each), plus batched retrieval.

The embedded topology has one owning replica (qdrant-edge locks its directory); with a server
topology a replica holds only clients, and every replica opens its stores at start, so the
deployment scales out. The models the index records come from the dense deployment (its
model id and dimension, known once the model is loaded) or are given (tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from deployments.replicas.base import Replica
from deployments.settings import ServiceConfig
from serve_app.batching import Coalescer, concatenating
from serve_app.errors import ModelMismatchError, ServiceUnavailableError
from serve_app.model_info import DenseInfo, StoreInfo
from serve_app.pipelines.components import index_models
from serve_app.pipelines.retrieval import IndexRetriever, Retrieved, RetrieveSpec
from serve_app.schemas import Chunk, DocumentInfo, ScopeKey, SearchFilters, Strategy
from serve_app.stores.base import (
    TOPOLOGIES,
    ChunkIndex,
    DocumentWrite,
    Hit,
    IndexModels,
    QueryVectors,
    SearchQuery,
)


@serve.deployment(name="store")
class StoreDeployment(Replica):
    settings_name = "store"
    tokenizes = False

    async def __init__(self, config: ServiceConfig, models: DeploymentHandle | dict) -> None:
        super().__init__(config)
        self.index: ChunkIndex = TOPOLOGIES.create(self.config.stores.topology, self.config)
        self.retriever = IndexRetriever(self.index, self.config.search.retrieve_batch)
        # The calls of every ingress replica, merged: what arrives while a batch runs goes
        # into the next as one search and one fetch (``serve.batching``).
        batching = config.serve.batching
        in_flight = batching.store_batches_in_flight
        if in_flight is None:  # the embedded engine runs inline: one batch at a time
            in_flight = 1 if self.config.stores.topology == "embedded" else 4
        self._calls: Coalescer[list[RetrieveSpec], Sequence[Retrieved]] = Coalescer(
            concatenating(self.retriever.retrieve_many),
            max_items=batching.store_merged_calls,
            max_in_flight=in_flight,
        )
        if isinstance(models, dict):
            self.models = IndexModels(**models)
        else:
            dense: DenseInfo = await models.info.remote()
            self.models = index_models(self.config, dense.model_id, dense.dim, dense.revision)
        await self.index.open(self.models)

    def info(self) -> StoreInfo:
        return StoreInfo(strategies=list(self.index.strategies), models=self.models.as_dict())

    async def open(self, models: IndexModels) -> None:
        """Callers check that this replica's index was built for their models."""
        if models != self.models:
            raise ModelMismatchError(f"store opened for {self.models}, asked for {models}")

    # The ChunkIndex protocol, one method each (``deployments.replicas.handles.RemoteIndex`` calls
    # them by name through the handle, with the same types). ``open`` and ``close`` belong
    # to the replica (it opens at start, closes at shutdown).
    async def write_documents(self, scope: ScopeKey, writes: list[DocumentWrite]) -> int:
        return await self.index.write_documents(scope, writes)

    async def delete_document(self, scope: ScopeKey, doc_id: str) -> int:
        return await self.index.delete_document(scope, doc_id)

    async def document_hashes(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, str]:
        return await self.index.document_hashes(scope, doc_ids)

    async def document_info(self, scope: ScopeKey, doc_id: str) -> DocumentInfo | None:
        return await self.index.document_info(scope, doc_id)

    async def search_batch(self, queries: list[SearchQuery]) -> list[dict[str, list[Hit]]]:
        return await self.index.search_batch(queries)

    async def fetch_batch(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[list[Chunk]]:
        return await self.index.fetch_batch(requests)

    async def has_collection(self, key: ScopeKey) -> bool:
        return await self.index.has_collection(key)

    async def list_collections(self, tenant: ScopeKey) -> list[dict[str, Any]]:
        return await self.index.list_collections(tenant)

    async def create_collection(self, key: ScopeKey) -> dict[str, Any]:
        return await self.index.create_collection(key)

    async def delete_collection(self, key: ScopeKey) -> int:
        return await self.index.delete_collection(key)

    async def search(
        self,
        strategy: Strategy,
        query: QueryVectors,
        limit: int,
        scope: ScopeKey,
        filters: SearchFilters | None = None,
    ) -> list[Hit]:
        return await self.index.search(strategy, query, limit, scope, filters)

    async def search_many(
        self,
        strategies: list[Strategy],
        query: QueryVectors,
        limit: int,
        scope: ScopeKey,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[Hit]]:
        return await self.index.search_many(strategies, query, limit, scope, filters)

    async def fetch(self, scope: ScopeKey, chunk_ids: list[str]) -> list[Chunk]:
        return await self.index.fetch(scope, chunk_ids)

    async def count(self, scope: ScopeKey | None = None) -> int:
        return await self.index.count(scope)

    async def inspect(self, selector: ScopeKey | None = None) -> dict[str, Any]:
        return await self.index.inspect(selector)

    async def healthy(self) -> bool:
        return await self.index.healthy()

    async def retrieve_many(self, specs: list[RetrieveSpec]) -> list[Retrieved]:
        """Search, fusion and fetch of a batch of queries (one round trip from the ingress)."""
        return list(await self._calls.submit(specs))

    async def check_health(self) -> None:
        if not await self.index.healthy():
            raise ServiceUnavailableError("the store is not healthy")

    async def __del__(self) -> None:
        await self.index.close()
