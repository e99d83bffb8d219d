"""The connection to one Qdrant (a server, or qdrant-client's local mode), its lifecycle,
and the versioned collection behind the alias (the primitives ``stores/versioning.py`` runs).

``collection`` in config is an alias in front of ``{collection}-v{n}``; the models that built
the vectors are the collection's metadata."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import httpx
from qdrant_client import AsyncQdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from serve_app.config import QdrantConfig
from serve_app.errors import ConfigError, ServiceUnavailableError
from serve_app.schemas import Strategy
from serve_app.stores.registry import registry_name
from serve_app.stores.values import PAYLOAD_INDEXES, IndexModels
from serve_app.stores.versioning import VersionTaken, attached_version, open_versioned

log = logging.getLogger(__name__)

_CLIENT_ERRORS = (UnexpectedResponse, ResponseHandlingException, httpx.HTTPError, OSError)


class QdrantStoreError(ServiceUnavailableError):
    """Qdrant refused or could not complete a request. Clients are told only that (or
    ``public``); the message, with Qdrant's own words, is logged."""

    def __init__(self, message: str, public: str | None = None) -> None:
        super().__init__(message, public or "Qdrant could not complete the request")


class QdrantConnection:
    """One Qdrant collection alias: the client, the versioned collection behind the alias,
    open / attach / close. Each collaborator of ``QdrantBackend`` takes it."""

    name = "qdrant"
    kind = "Qdrant collection"

    def __init__(
        self,
        config: QdrantConfig,
        data_path: Path,
        strategies: tuple[Strategy, ...] = ("bm25", "splade", "dense"),
        migrate: bool = False,
    ) -> None:
        self.config = config
        self.data_path = data_path
        self.strategies = strategies
        self.alias = config.collection
        self.migrate = migrate
        self.physical: str | None = None
        self._client: AsyncQdrantClient | None = None

    @property
    def client(self) -> AsyncQdrantClient:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def _make_client(self) -> AsyncQdrantClient:
        config = self.config
        if config.local_path:
            if config.local_path == ":memory:":
                return AsyncQdrantClient(location=":memory:")
            path = self.data_path / config.local_path
            path.mkdir(parents=True, exist_ok=True)
            return AsyncQdrantClient(path=str(path))
        if not config.url:
            raise ConfigError("stores.qdrant.url is not set")
        api_key = os.environ.get(config.api_key_env) if config.api_key_env else None
        if config.api_key_env and not api_key:
            raise ConfigError(f"stores.qdrant.api_key_env names {config.api_key_env}, not set")
        verify: bool | str = config.ca_certs or config.verify_certs
        return AsyncQdrantClient(
            url=config.url,
            api_key=api_key,
            timeout=int(config.timeout_s),
            verify=verify,
            check_compatibility=False,  # a blocking probe at construction; readiness covers it
        )

    async def _call(self, what: str, coro: Any) -> Any:
        try:
            return await coro
        except _CLIENT_ERRORS as error:
            raise QdrantStoreError(
                f"Qdrant failed during {what}: {error}", f"Qdrant failed during {what}"
            ) from None

    # -- versioned collection primitives (stores/versioning.py) -------------------------
    async def alias_target(self) -> str | None:
        response = await self.client.get_aliases()
        return next(
            (a.collection_name for a in response.aliases if a.alias_name == self.alias), None
        )

    async def version_names(self) -> list[str]:
        return [c.name for c in (await self.client.get_collections()).collections]

    def binding(self, models: IndexModels) -> dict[str, Any]:
        stored = models.as_dict()
        if "splade" not in self.strategies:
            stored["splade_model"] = None
        if "bm25" not in self.strategies:
            stored["bm25_model"] = None
        return stored

    async def stored_binding(self, name: str) -> Any:
        info = await self.client.get_collection(name)
        return (info.config.metadata or {}).get("models")

    async def record_binding(self, name: str, models: IndexModels) -> None:
        # Qdrant merges metadata keys: the strategies and the registry stay as they are.
        await self.client.update_collection(name, metadata={"models": self.binding(models)})

    async def create_version(self, name: str, models: IndexModels) -> None:
        quantization = (
            qm.ScalarQuantization(
                scalar=qm.ScalarQuantizationConfig(type=qm.ScalarType.INT8, always_ram=True)
            )
            if self.config.quantization == "int8"
            else None
        )
        sparse = {}
        if "splade" in self.strategies:
            sparse["splade"] = qm.SparseVectorParams()
        if "bm25" in self.strategies:
            sparse["bm25"] = qm.SparseVectorParams(modifier=qm.Modifier.IDF)
        try:
            await self._create_collection(name, models, sparse, quantization)
        except (UnexpectedResponse, ValueError) as error:
            if already_exists(error, name):
                raise VersionTaken(name) from None
            raise

    async def prepare_version(self, name: str) -> None:
        if not self.config.local_path:  # local mode has no payload indexes (and warns)
            await self.client.create_payload_index(
                name,
                "tenant_id",
                qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True),
            )
            for field in (f for f in PAYLOAD_INDEXES if f != "tenant_id"):
                await self.client.create_payload_index(name, field, qm.PayloadSchemaType.KEYWORD)

    async def version_is_empty(self, name: str) -> bool:
        return (await self.client.count(name, exact=True)).count == 0

    async def _create_collection(
        self, name: str, models: IndexModels, sparse: dict[str, Any], quantization: Any
    ) -> None:
        await self.client.create_collection(
            name,
            vectors_config={
                "dense": qm.VectorParams(
                    size=models.dense_dim,
                    distance=qm.Distance.COSINE,
                    on_disk=self.config.on_disk,
                    hnsw_config=qm.HnswConfigDiff(
                        m=self.config.hnsw_m, ef_construct=self.config.hnsw_ef_construct
                    ),
                    quantization_config=quantization,
                )
            },
            sparse_vectors_config=sparse or None,
            shard_number=self.config.shard_number,
            replication_factor=self.config.replication_factor,
            metadata={"models": self.binding(models), "strategies": list(self.strategies)},
        )

    async def point_alias(self, name: str, previous: str | None) -> None:
        operations: list[Any] = []
        if previous is not None:
            operations.append(
                qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=self.alias))
            )
        operations.append(
            qm.CreateAliasOperation(
                create_alias=qm.CreateAlias(collection_name=name, alias_name=self.alias)
            )
        )
        await self.client.update_collection_aliases(change_aliases_operations=operations)

    # -- lifecycle -----------------------------------------------------------------------
    async def open(self, models: IndexModels) -> None:
        self.physical = await self._call("open", open_versioned(self, models, self.migrate))

    async def attach(self) -> None:
        self.physical = await self._call(
            "alias lookup", attached_version(self, "stores.qdrant.collection")
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def healthy(self) -> bool:
        try:
            await self.client.get_collection(self.alias)
            return True
        except Exception:  # any failure means "not healthy"
            return False

    @property
    def registry_collection(self) -> str:
        """The collection of its own beside the alias that holds the collection registry."""
        return registry_name(self.alias)


def already_exists(error: Exception, name: str) -> bool:
    """Whether a collection creation failed because ``name`` exists: 409 since Qdrant 1.8,
    400 with this text before; local mode raises a ValueError."""
    if isinstance(error, UnexpectedResponse):
        return error.status_code == 409 or b"already exists" in (error.content or b"")
    return f"Collection {name} already exists" in str(error)
