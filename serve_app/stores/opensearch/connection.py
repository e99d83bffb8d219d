"""The connection to OpenSearch, its lifecycle, and the versioned index behind the alias
(the primitives ``stores/versioning.py`` runs).

The index name in config is an alias in front of a versioned physical index
(``{alias}-v{n}``); the models that built the vectors live in the mapping's ``_meta``."""

from __future__ import annotations

import logging
import os
from typing import Any

from opensearchpy import AsyncOpenSearch
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError
from opensearchpy.exceptions import NotFoundError as OpenSearchNotFound
from opensearchpy.exceptions import TransportError

from serve_app.config import OpenSearchConfig
from serve_app.errors import ConfigError, ServiceUnavailableError
from serve_app.schemas import Strategy
from serve_app.stores.opensearch import bodies
from serve_app.stores.registry import registry_name
from serve_app.stores.values import IndexModels
from serve_app.stores.versioning import VersionTaken, attached_version, open_versioned

log = logging.getLogger(__name__)


class OpenSearchStoreError(ServiceUnavailableError):
    """OpenSearch refused or could not complete a request. Clients are told only that (or
    ``public``); the message, with OpenSearch's own words, is logged."""

    def __init__(self, message: str, public: str | None = None) -> None:
        super().__init__(message, public or "OpenSearch could not complete the request")


def _credentials(config: OpenSearchConfig) -> tuple[str, str] | None:
    if not config.username_env:
        return None
    user = os.environ.get(config.username_env)
    password = os.environ.get(config.password_env or "", "")
    if not user:
        raise ConfigError(
            f"stores.opensearch.username_env names {config.username_env}, which is not set"
        )
    return (user, password)


def make_client(config: OpenSearchConfig) -> AsyncOpenSearch:
    if not config.hosts:
        raise ConfigError("stores.opensearch.hosts is empty")
    auth = _credentials(config)
    return AsyncOpenSearch(
        hosts=list(config.hosts),
        http_auth=auth,
        verify_certs=config.verify_certs,
        ca_certs=config.ca_certs,
        timeout=config.timeout_s,
        max_retries=config.max_retries,
        retry_on_timeout=True,
    )


class OpenSearchConnection:
    """One OpenSearch index alias: the client, the versioned index behind the alias,
    open / attach / close. Each collaborator of ``OpenSearchBackend`` takes it."""

    name = "opensearch"
    kind = "OpenSearch index"
    strategies: tuple[Strategy, ...] = ("bm25", "splade")

    def __init__(
        self, config: OpenSearchConfig, migrate: bool = False, client: AsyncOpenSearch | None = None
    ) -> None:
        self.config = config
        self.alias = config.index
        self.migrate = migrate
        self._client = client
        self.physical: str | None = None

    @property
    def client(self) -> AsyncOpenSearch:
        if self._client is None:
            self._client = make_client(self.config)
        return self._client

    async def _call(self, what: str, coro: Any) -> Any:
        try:
            return await coro
        except OpenSearchConnectionError as error:
            raise OpenSearchStoreError(
                f"OpenSearch unreachable during {what}: {error}",
                f"OpenSearch unreachable during {what}",
            ) from None
        except TransportError as error:
            raise OpenSearchStoreError(
                f"OpenSearch refused {what}: {error.status_code} {error.error}",
                f"OpenSearch refused {what} ({error.status_code})",
            ) from None

    # -- versioned index primitives (stores/versioning.py) ------------------------------
    async def alias_target(self) -> str | None:
        try:
            found = await self.client.indices.get_alias(name=self.alias)
        except OpenSearchNotFound:
            return None
        return next(iter(found)) if found else None

    async def version_names(self) -> list[str]:
        try:
            return list(await self.client.indices.get(index=f"{self.alias}-v*"))
        except OpenSearchNotFound:
            return []

    def binding(self, models: IndexModels) -> dict[str, Any]:
        return {"models": models.as_dict(), "mapping_version": bodies.MAPPING_VERSION}

    async def stored_binding(self, name: str) -> Any:
        mapping = await self.client.indices.get_mapping(index=name)
        meta = mapping[name]["mappings"].get("_meta", {})
        return {"models": meta.get("models"), "mapping_version": meta.get("mapping_version")}

    async def record_binding(self, name: str, models: IndexModels) -> None:
        await self.client.indices.put_mapping(index=name, body={"_meta": self.binding(models)})

    async def create_version(self, name: str, models: IndexModels) -> None:
        try:
            await self.client.indices.create(
                index=name, body=bodies.index_body(self.config, models)
            )
        except TransportError as error:
            if error.error == "resource_already_exists_exception":
                raise VersionTaken(name) from None
            raise

    async def prepare_version(self, name: str) -> None:
        return None  # the mapping comes with the index's creation

    async def version_is_empty(self, name: str) -> bool:
        return int((await self.client.count(index=name))["count"]) == 0

    async def point_alias(self, name: str, previous: str | None) -> None:
        await self.client.indices.update_aliases(
            body=bodies.alias_switch_body(self.alias, name, previous)
        )

    # -- lifecycle -----------------------------------------------------------------------
    async def open(self, models: IndexModels) -> None:
        self.physical = await self._call("open", open_versioned(self, models, self.migrate))

    async def attach(self) -> None:
        self.physical = await self._call(
            "alias lookup", attached_version(self, "stores.opensearch.index")
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def healthy(self) -> bool:
        try:
            return bool(await self.client.ping())
        except Exception:  # any failure means "not healthy"
            return False

    @property
    def registry_index(self) -> str:
        """The index of its own beside the alias that holds the collection registry."""
        return registry_name(self.alias)
