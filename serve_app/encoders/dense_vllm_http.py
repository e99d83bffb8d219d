"""Dense embeddings from an external vLLM OpenAI-compatible server (``POST /v1/embeddings``)."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import httpx
import numpy as np

from serve_app.config import DenseConfig
from serve_app.encoders.dense_inputs import DenseInputs, finish_vectors, output_dim
from serve_app.encoders.queue import Lane
from serve_app.encoders.token_batches import token_budget_batches
from serve_app.errors import ConfigError, InvalidInputError, ServiceUnavailableError

log = logging.getLogger(__name__)

# Worth another attempt: the server is starting, overloaded or briefly unreachable.
_RETRY_STATUS = {429, 500, 502, 503, 504}


class VllmHttpDenseEncoder:
    """The dense embedder as a client of a vLLM server the user already runs.

    Inputs are tokenised here exactly as in the in-process backends (``DenseInputs``) and sent
    as token ids, so the server cannot truncate or template differently; requests are
    token-budget batches (longest first), at most ``dense.http.max_concurrency`` in flight.
    Vectors are truncated to ``output_dim`` and L2-normalised here.

    Errors: connection failures, timeouts, 429 and 5xx are retried ``dense.http.retries``
    times with exponential backoff, then raise ServiceUnavailableError naming the URL;
    401/403/404 raise ConfigError (key or model name); other 4xx raise InvalidInputError with
    the server's message. Construction probes the server once (one short embedding) to learn
    the dimension and fail fast when it is unreachable or serves another model.
    """

    def __init__(self, config: DenseConfig) -> None:
        self.config = config
        self.http = config.http
        self.model_id = config.model
        self.served_model = self.http.served_model or config.model
        self.url = self.http.url.rstrip("/") + "/v1/embeddings"
        self.inputs = DenseInputs(config)
        self._headers = {"content-type": "application/json"}
        if self.http.api_key_env:
            key = os.environ.get(self.http.api_key_env)
            if not key:
                raise ConfigError(
                    f"dense.http.api_key_env names {self.http.api_key_env!r}, which is not set"
                )
            self._headers["authorization"] = f"Bearer {key}"
        self._timeout = httpx.Timeout(self.http.timeout_s, connect=self.http.connect_timeout_s)
        self._clients: dict[int, httpx.AsyncClient] = {}
        self.model_dim = self._probe_dim()
        self.dim = output_dim(config, self.model_dim)

    def _probe_dim(self) -> int:
        """One blocking embedding at start (no event loop needed): the server's dimension."""
        body = {
            "model": self.served_model,
            "input": self.inputs.token_ids(["probe"]),
            "encoding_format": "float",
        }
        try:
            with httpx.Client(timeout=self._timeout, headers=self._headers) as client:
                response = client.post(self.url, json=body)
        except httpx.TransportError as error:
            raise ServiceUnavailableError(
                f"dense server {self.url} is unreachable ({type(error).__name__}: {error}); "
                "check dense.http.url"
            ) from None
        if response.status_code != 200:
            raise self._client_error(response)
        return int(self._vectors(response.json(), 1).shape[1])

    def _client(self) -> httpx.AsyncClient:
        """One pooled client per event loop (a client must not cross loops)."""
        loop = id(asyncio.get_running_loop())
        client = self._clients.get(loop)
        if client is None or client.is_closed:
            limits = httpx.Limits(max_connections=self.http.max_concurrency)
            client = httpx.AsyncClient(timeout=self._timeout, headers=self._headers, limits=limits)
            self._clients[loop] = client
        return client

    async def _post(self, client: httpx.AsyncClient, ids: list[list[int]]) -> np.ndarray:
        body = {"model": self.served_model, "input": ids, "encoding_format": "float"}
        attempts = self.http.retries + 1
        problem = ""
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(self.http.retry_backoff_s * 2 ** (attempt - 1))
            try:
                response = await client.post(self.url, json=body)
            except httpx.TransportError as error:  # connect errors and timeouts
                problem = f"{type(error).__name__}: {error}"
                continue
            if response.status_code in _RETRY_STATUS:
                problem = f"HTTP {response.status_code}: {response.text[:300]}"
                continue
            if response.status_code != 200:
                raise self._client_error(response)
            return self._vectors(response.json(), len(ids))
        log.warning("vLLM server %s failed %d times: %s", self.url, attempts, problem)
        raise ServiceUnavailableError(
            f"dense server {self.url} failed after {attempts} attempts: {problem}"
        )

    def _client_error(self, response: httpx.Response) -> Exception:
        detail = response.text[:300]
        if response.status_code in _RETRY_STATUS:
            return ServiceUnavailableError(
                f"dense server {self.url} answered HTTP {response.status_code}: {detail}"
            )
        if response.status_code in (401, 403):
            return ConfigError(
                f"dense server {self.url} refused the request (HTTP {response.status_code}); "
                f"check dense.http.api_key_env: {detail}"
            )
        if response.status_code == 404:
            return ConfigError(
                f"dense server {self.url}: HTTP 404 for model {self.served_model!r}; "
                f"check dense.http.url and dense.http.served_model: {detail}"
            )
        return InvalidInputError(f"dense server rejected the input: {detail}")

    def _vectors(self, payload: dict[str, Any], expected: int) -> np.ndarray:
        data = sorted(payload.get("data", []), key=lambda item: item["index"])
        if len(data) != expected:
            raise ServiceUnavailableError(
                f"dense server {self.url} returned {len(data)} embeddings for {expected} inputs"
            )
        return np.asarray([item["embedding"] for item in data], dtype=np.float32)

    def format_query(self, query: str) -> str:
        return self.inputs.format_query(query)

    async def embed_formatted(self, texts: list[str]) -> tuple[np.ndarray, dict]:
        """Vectors for already-formatted texts plus batching stats; requests run concurrently."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32), {"batch_size": 0}
        ids = self.inputs.token_ids(texts)
        lengths = [len(x) for x in ids]
        batches = token_budget_batches(
            lengths, self.config.max_batch_tokens, self.config.batch_size
        )
        client = self._client()
        gate = asyncio.Semaphore(self.http.max_concurrency)

        async def one(batch: list[int]) -> np.ndarray:
            async with gate:
                return await self._post(client, [ids[i] for i in batch])

        results = await asyncio.gather(*(one(b) for b in batches))
        out = np.zeros((len(texts), self.model_dim), dtype=np.float32)
        for batch, vectors in zip(batches, results, strict=True):
            out[batch] = vectors
        stats = {
            "batch_size": len(texts),
            "model_batches": len(batches),
            "tokens": sum(lengths),
            "padding_ratio": 0.0,  # token ids travel unpadded; the server packs them
        }
        return finish_vectors(out, self.dim, self.config.normalize), stats

    async def encode_lane(self, lane: Lane, texts: list[str]) -> tuple[np.ndarray, dict]:
        """The server batches and schedules itself: no local queue, queries formatted here."""
        return await self.embed_formatted(
            [self.format_query(t) for t in texts] if lane == "query" else texts
        )

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return (await self.embed_formatted(texts))[0]

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        return (await self.embed_formatted([self.format_query(t) for t in texts]))[0]

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


def build(config: DenseConfig) -> VllmHttpDenseEncoder:
    return VllmHttpDenseEncoder(config)
