"""The store deployment: a replica opens the configured topology itself and serves the
``ServedIndex`` protocol (``deployments/replicas/store_seam.py``), plus batched retrieval.

The embedded topology has one owning replica (qdrant-edge locks its directory); with a server
topology a replica holds only clients, and every replica opens its stores at start, so the
deployment scales out. The models the index records come from the dense deployment (its
model id and dimension, known once the model is loaded) or are given (tests).
"""

from __future__ import annotations

from collections.abc import Sequence

from ray import serve
from ray.serve.handle import DeploymentHandle

from deployments.replicas.base import Replica
from deployments.replicas.store_seam import ServedOnReplica
from deployments.settings import ServiceConfig
from serve_app.batching import Coalescer, concatenating
from serve_app.errors import ModelMismatchError, ServiceUnavailableError
from serve_app.model_info import DenseInfo, StoreInfo
from serve_app.pipelines.components import index_models
from serve_app.pipelines.retrieval import IndexRetriever, Retrieved, RetrieveSpec
from serve_app.stores.base import (
    TOPOLOGIES,
    ChunkIndex,
    IndexModels,
)


@serve.deployment(name="store")
class StoreDeployment(ServedOnReplica, Replica):
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

    async def retrieve_many(self, specs: list[RetrieveSpec]) -> list[Retrieved]:
        """Search, fusion and fetch of a batch of queries (one round trip from the ingress)."""
        return list(await self._calls.submit(specs))

    async def check_health(self) -> None:
        if not await self.index.healthy():
            raise ServiceUnavailableError("the store is not healthy")

    async def __del__(self) -> None:
        await self.index.close()
