"""The ingress deployment: composes the model and store deployments into the ingest and
search graphs behind serve_app's HTTP API."""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from deployments.replicas.edge import use_api
from deployments.replicas.handles import (
    RemoteChunker,
    RemoteDenseEncoder,
    RemoteLLM,
    RemoteReranker,
    RemoteRetriever,
    RemoteSparseEncoder,
    call,
    serve_transport,
    transport_of,
)
from deployments.replicas.logs import configure_replica_logging
from deployments.replicas.metrics import RayInstruments
from deployments.replicas.options import ConfiguredDeployment
from deployments.replicas.store_seam import RemoteIndex
from deployments.settings import ServiceConfig
from serve_app.api.app import create_app
from serve_app.api.observability import Metrics
from serve_app.encoders.bm25 import Bm25Encoder
from serve_app.pipelines.components import build_components
from serve_app.service import ReadinessCheck, RetrievalService


def _ping(name: str, handle: DeploymentHandle) -> ReadinessCheck:
    async def check() -> None:
        await call(name, handle.ping.remote())

    return check


@serve.deployment(name="ingress")
@serve.ingress()
class IngressDeployment(ConfiguredDeployment):
    settings_name = "ingress"

    async def __init__(
        self,
        config: ServiceConfig,
        chunker: DeploymentHandle,
        dense: DeploymentHandle,
        splade: DeploymentHandle | None,
        reranker: DeploymentHandle | None,
        store: DeploymentHandle,
        llm: DeploymentHandle | None = None,
    ) -> None:
        # The edge's access line (principal, tenant, route, status, request id) is the audit
        # trail: written to the process's own stderr as it happens, never through Serve's
        # 1,000-record buffer (nor through Serve's stderr capture, which walks the stack for
        # every line: about 6 % of the ingress' CPU under load).
        configure_replica_logging(access_log=True)
        given = {
            "chunker": chunker,
            "dense": dense,
            "splade": splade,
            "reranker": reranker,
            "llm": llm,
        }
        self.handles = {
            name: serve_transport(handle)
            for name, handle in {**given, "store": store}.items()
            if handle is not None
        }
        chunker, dense, store = (self.handles[n] for n in ("chunker", "dense", "store"))
        splade, reranker = self.handles.get("splade"), self.handles.get("reranker")
        self.config = config
        # For the edge on Serve's server (deployments.replicas.edge).
        use_api(self.config.api)
        self.metrics = Metrics(RayInstruments())  # every replica's counts, summed by Prometheus
        observe = self.metrics.observe_batch
        batching = config.serve.batching
        sparse: dict[str, Any] = {}
        if self.config.bm25.enabled:
            sparse["bm25"] = Bm25Encoder(self.config.bm25)  # tokenising only: no model to serve
        if splade is not None:
            info = await splade.info.remote()
            sparse["splade"] = RemoteSparseEncoder(splade, info, observe, batching)
        # Store replicas open themselves; building checks they did so for these models.
        components = await build_components(
            self.config,
            chunker=RemoteChunker(chunker, await chunker.fingerprint.remote()),
            dense=RemoteDenseEncoder(dense, await dense.info.remote(), observe, batching),
            sparse=sparse,
            reranker=RemoteReranker(reranker, await reranker.info.remote(), observe, batching)
            if reranker
            else None,
            index=RemoteIndex(store, await store.info.remote()),
            retriever=RemoteRetriever(store, batching, self.config.search.retrieve_batch),
        )

        async def store_ready() -> None:
            if not await components.index.healthy():
                raise RuntimeError("store not healthy")

        checks: dict[str, ReadinessCheck] = {
            "store": store_ready,
            "chunker": _ping("chunker", chunker),
        }
        checks["dense"] = _ping("dense", dense)
        if splade is not None:
            checks["splade"] = _ping("splade", splade)
        if reranker is not None:
            checks["reranker"] = _ping("reranker", reranker)
        # The LLM is reported by /readyz but does not gate it (RetrievalService adds it): without
        # it searches still work and answers still return their results with an error event.
        remote_llm = None
        if "llm" in self.handles:
            llm_handle = self.handles["llm"]
            remote_llm = RemoteLLM(
                llm_handle, await llm_handle.info.remote(), self.config.llm.retry_after_s
            )
        self.service = RetrievalService(components, checks, llm=remote_llm)

    def transports(self) -> dict[str, str]:
        """How this replica calls each deployment ("grpc" or "actor"); for operators and tests."""
        return {name: transport_of(handle) for name, handle in self.handles.items()}

    def __serve_build_asgi_app__(self):
        return create_app(
            self.service,
            self.metrics,
            set_request_id_header=False,
            host=self.config.serve.host,
        )
