"""The store deployment: one replica owns the embedded index (qdrant-edge locks its directory);
with a server topology it holds only clients and may run several replicas."""

from __future__ import annotations

from typing import Any

from ray import serve

from serve_app.config import config_from_dict
from serve_app.pipelines.components import register_builtins
from serve_app.schemas import Chunk, DocumentInfo, SearchFilters, Strategy
from serve_app.stores.base import TOPOLOGIES, DocumentWrite, Hit, IndexModels, QueryVectors


@serve.deployment(name="store")
class StoreDeployment:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config_from_dict(config, "serve args")
        register_builtins()
        self.index = TOPOLOGIES.create(self.config.stores.topology, self.config)
        self.models: IndexModels | None = None

    async def open(self, models: IndexModels) -> None:
        """Open once; later calls (other ingress replicas) must name the same models."""
        if self.models is None:
            await self.index.open(models)
            self.models = models
        elif models != self.models:
            from serve_app.errors import ModelMismatchError

            raise ModelMismatchError(f"store already open for {self.models}, asked for {models}")

    async def healthy(self) -> bool:
        return self.models is not None and await self.index.healthy()

    def _require_open(self) -> None:
        if self.models is None:
            from serve_app.errors import ServiceUnavailableError

            raise ServiceUnavailableError("the store is starting and not open yet; retry shortly")

    async def write_documents(self, tenant_id: str, writes: list[DocumentWrite]) -> int:
        self._require_open()
        return await self.index.write_documents(tenant_id, writes)

    async def delete_document(self, tenant_id: str, doc_id: str) -> int:
        self._require_open()
        return await self.index.delete_document(tenant_id, doc_id)

    async def document_hashes(self, tenant_id: str, doc_ids: list[str]) -> dict[str, str]:
        self._require_open()
        return await self.index.document_hashes(tenant_id, doc_ids)

    async def document_info(self, tenant_id: str, doc_id: str) -> DocumentInfo | None:
        self._require_open()
        return await self.index.document_info(tenant_id, doc_id)

    async def search(
        self,
        strategy: Strategy,
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None,
    ) -> list[Hit]:
        self._require_open()
        return await self.index.search(strategy, query, limit, tenant_id, filters)

    async def search_many(
        self,
        strategies: list[Strategy],
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None,
    ) -> dict[str, list[Hit]]:
        self._require_open()
        return await self.index.search_many(strategies, query, limit, tenant_id, filters)

    async def fetch(self, tenant_id: str, chunk_ids: list[str]) -> list[Chunk]:
        self._require_open()
        return await self.index.fetch(tenant_id, chunk_ids)

    async def count(self, tenant_id: str | None = None) -> int:
        self._require_open()
        return await self.index.count(tenant_id)

    async def check_health(self) -> None:
        if not await self.index.healthy() and self.models is not None:
            raise RuntimeError("store closed")

    async def __del__(self) -> None:
        await self.index.close()
