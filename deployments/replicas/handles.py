"""DeploymentHandle[Any] adapters behind serve_app's protocols, so the pipelines run unchanged.

Ray failures (a replica dead or unreachable, back-pressure) become ServiceUnavailableError at
this boundary; a library error raised inside a deployment keeps its type and API code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import grpc
import numpy as np
from ray import exceptions as ray_exceptions
from ray.serve import exceptions as serve_exceptions
from ray.serve.handle import DeploymentHandle

from deployments.settings import BatchingSettings
from serve_app.batching import Coalescer, concatenating
from serve_app.encoders.queue import Lane
from serve_app.errors import OverloadedError, ServeAppError, ServiceUnavailableError
from serve_app.generation.base import Completion, GenerationParams, Message, Usage
from serve_app.model_info import DenseInfo, LLMInfo, ModelInfo
from serve_app.pipelines.retrieval import Retrieved, RetrieveSpec
from serve_app.schemas import (
    Chunk,
    Document,
    SparseVector,
)

T = TypeVar("T")
BatchObserver = Callable[[str, dict[str, Any]], None]

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
    except grpc.aio.AioRpcError as error:  # gRPC transport failures; Ray maps UNAVAILABLE
        raise ServiceUnavailableError(
            f"{deployment} deployment call failed: gRPC {error.code().name}"
        ) from None


def serve_transport(handle: DeploymentHandle[Any]) -> DeploymentHandle[Any]:
    """``handle``, calling over the transport Serve is configured for in this process.

    A handle carries the transport of the process that built the application graph: its
    default (``_by_reference``) was read from Serve's switches when that process first
    imported Ray Serve, which may have been before ``serve.env`` was set (a test run, a
    program embedding the local run). The replica's environment is the configured one, so
    the replica applies it: gRPC between replicas under ``RAY_SERVE_THROUGHPUT_OPTIMIZED``,
    Ray actor calls otherwise (README, "Ray Serve deployments", measures both)."""
    from ray.serve._private.constants import RAY_SERVE_USE_GRPC_BY_DEFAULT

    return handle.options(_by_reference=not RAY_SERVE_USE_GRPC_BY_DEFAULT)


def transport_of(handle: DeploymentHandle[Any]) -> str:
    options: Any = handle.handle_options  # _by_reference: the local handle's options only
    return "actor" if options._by_reference else "grpc"


def _ignore(_: str, __: dict[str, Any]) -> None:
    return None


class _RemoteLanes:
    """One encoder deployment's two lanes; concurrent queries of this ingress replica share
    one call (natural batching), documents go as the ingest batches them."""

    deployment: str
    method: str

    def __init__(
        self,
        handle: DeploymentHandle[Any],
        info: ModelInfo,
        observe: BatchObserver = _ignore,
        batching: BatchingSettings | None = None,
    ) -> None:
        batching = batching or BatchingSettings()
        self.handle = handle
        # `handle.embed` builds a new handle (DeploymentHandle[Any].options) on every access:
        # made once here, not once a call (1.35-2.4 % of an ingress replica's samples).
        self._remote = getattr(handle, self.method)
        self.model_id = info.model_id
        self.observe = observe
        self._queries: Coalescer[list[str], Any] = Coalescer(
            concatenating(self._query_lane),
            max_items=batching.query_batch,
            max_in_flight=batching.calls_in_flight,
        )

    async def _lane(self, mode: Lane, texts: list[str]) -> Any:
        vectors, stats = await call(self.deployment, self._remote.remote(mode, texts))
        self.observe(self.deployment, stats)
        return vectors

    async def _query_lane(self, texts: list[str]) -> Any:
        return await self._lane("query", texts)


class RemoteDenseEncoder(_RemoteLanes):
    deployment, method = "dense", "embed"

    def __init__(
        self,
        handle: DeploymentHandle[Any],
        info: DenseInfo,
        observe: BatchObserver = _ignore,
        batching: BatchingSettings | None = None,
    ) -> None:
        super().__init__(handle, info, observe, batching)
        self.dim = info.dim
        self.revision = info.revision  # of the weights its replicas loaded

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return cast(np.ndarray, await self._lane("document", texts))

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        return cast(np.ndarray, await self._queries.submit(texts))


class RemoteSparseEncoder(_RemoteLanes):
    deployment, method = "splade", "encode"

    async def encode_documents(self, texts: list[str]) -> list[SparseVector]:
        return cast(list[SparseVector], await self._lane("document", texts))

    async def encode_queries(self, texts: list[str]) -> list[SparseVector]:
        return list(await self._queries.submit(texts))


class RemoteReranker:
    """Concurrent rerank requests of this ingress replica share one call."""

    def __init__(
        self,
        handle: DeploymentHandle[Any],
        info: ModelInfo,
        observe: BatchObserver = _ignore,
        batching: BatchingSettings | None = None,
    ) -> None:
        batching = batching or BatchingSettings()
        self._score_many_handle = handle.score_many  # made once: see _RemoteLanes
        self.model_id = info.model_id
        self.observe = observe
        self._requests: Coalescer[tuple[str, list[str]], list[float]] = Coalescer(
            self._score_many,
            max_items=batching.rerank_batch,
            max_in_flight=batching.calls_in_flight,
        )

    async def _score_many(self, requests: list[tuple[str, list[str]]]) -> list[list[float]]:
        results = await call("reranker", self._score_many_handle.remote(requests))
        for _, stats in results:
            self.observe("reranker", stats)
        return [scores for scores, _ in results]

    async def score(self, query: str, passages: list[str]) -> list[float]:
        return await self._requests.submit((query, passages))


class RemoteRetriever:
    """Search, fusion and fetch in the store replica: one round trip per batch of queries."""

    def __init__(
        self,
        handle: DeploymentHandle[Any],
        batching: BatchingSettings | None = None,
        max_queries: int = 64,  # search.retrieve_batch
    ) -> None:
        batching = batching or BatchingSettings()
        self._retrieve_many_handle = handle.retrieve_many  # made once: see _RemoteLanes
        self._specs: Coalescer[RetrieveSpec, Retrieved] = Coalescer(
            self._retrieve_many,
            max_items=max_queries,
            max_in_flight=batching.calls_in_flight,
        )

    async def _retrieve_many(self, specs: list[RetrieveSpec]) -> list[Retrieved]:
        return await call("store", self._retrieve_many_handle.remote(specs))

    async def retrieve(self, spec: RetrieveSpec) -> Retrieved:
        return await self._specs.submit(spec)


class RemoteChunker:
    name = "remote"

    def __init__(self, handle: DeploymentHandle[Any], fingerprint: dict[str, Any]) -> None:
        self.handle = handle
        self._fingerprint = fingerprint
        self.name = fingerprint.get("chunker", "remote")

    def fingerprint(self) -> dict[str, Any]:
        return self._fingerprint

    async def chunk_many(self, documents: list[Document]) -> list[list[Chunk]]:
        return await call("chunker", self.handle.chunk_many.remote(documents))


class RemoteTokenStream:
    """A generation streamed from the LLM deployment; ``aclose`` cancels the call, which
    closes the generator in the replica and so stops the engine."""

    def __init__(self, responses: Any) -> None:
        self._responses = responses
        self.usage = Usage()
        self.finish_reason: str | None = None
        self._closed = False

    async def __aiter__(self) -> Any:
        while True:
            try:
                item = await call("llm", self._responses.__anext__())
            except StopAsyncIteration:
                return
            if "text" in item:
                yield item["text"]
            else:
                self.finish_reason = item["finish_reason"]
                self.usage = Usage(item["prompt_tokens"], item["completion_tokens"])

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._responses.cancel()


class RemoteLLM:
    """The LLM protocol over the LLM deployment. Serve's own back-pressure (every replica at
    ``max_ongoing_requests`` with its queue full) is the replicas' overload: a 429."""

    def __init__(self, handle: DeploymentHandle[Any], info: LLMInfo, retry_after_s: float) -> None:
        self._complete = handle.complete  # made once: see _RemoteLanes
        self._count_tokens = handle.count_tokens
        self._count_prompt_tokens = handle.count_prompt_tokens
        self._as_read = handle.as_read
        self._stream = handle.options(stream=True).stream
        self._ping = handle.ping
        self.model_id = info.model_id
        self.retry_after_s = retry_after_s

    async def _admitted(self, awaitable: Awaitable[T]) -> T:
        try:
            return await awaitable
        except serve_exceptions.BackPressureError:
            raise OverloadedError(
                "every LLM replica is at its limit; retry shortly",
                retry_after_s=self.retry_after_s,
            ) from None

    async def check_health(self) -> None:
        """The LLM deployment answers (for /readyz; Serve checks each replica's engine)."""
        await call("llm", self._ping.remote())

    async def complete(self, messages: list[Message], params: GenerationParams) -> Completion:
        response: Any = self._complete.remote(messages, params)  # a DeploymentResponse
        try:
            return await call("llm", self._admitted(response))
        except asyncio.CancelledError:
            # A caller that gave up (the understanding deadline, a client that left): Serve
            # does not cancel the replica's call when its awaiter is cancelled, so it is told
            # here; the replica stops generating for nobody and frees its slot or queue place.
            response.cancel()
            raise

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return await call("llm", self._count_tokens.remote(texts))

    async def count_prompt_tokens(self, messages: list[Message]) -> int:
        return await call("llm", self._count_prompt_tokens.remote(messages))

    async def as_read(self, texts: list[str]) -> list[str]:
        return await call("llm", self._as_read.remote(texts))

    async def open_stream(
        self, messages: list[Message], params: GenerationParams
    ) -> RemoteTokenStream:
        responses: Any = self._stream.remote(messages, params)  # a response generator
        try:  # the first item: the replica admitted the request (or refused it)
            await call("llm", self._admitted(responses.__anext__()))
        except BaseException:
            responses.cancel()
            raise
        return RemoteTokenStream(responses)
