"""OpenSearch adapter: BM25 on analysed text fields and SPLADE in a ``rank_features`` field.

The index name in config is an alias in front of a versioned physical index
(``{alias}-v{n}``); the models that built the vectors live in the mapping's ``_meta``. Writes go
through ``_bulk`` in bounded batches; items that fail with a retryable status (429, 5xx) are
retried with exponential backoff, anything else fails the call with the item's reason.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from opensearchpy import AsyncOpenSearch
from opensearchpy.exceptions import (
    ConnectionError as OpenSearchConnectionError,
)
from opensearchpy.exceptions import (
    NotFoundError as OpenSearchNotFound,
)
from opensearchpy.exceptions import (
    TransportError,
)

from serve_app.config import OpenSearchConfig
from serve_app.errors import ConfigError, ModelMismatchError, ServiceUnavailableError
from serve_app.schemas import Chunk, DocumentInfo, SearchFilters, Strategy
from serve_app.stores import opensearch_bodies as bodies
from serve_app.stores.base import (
    DocumentStates,
    DocumentWrite,
    Hit,
    IndexModels,
    QueryVectors,
    SearchViaBatch,
    complete_hashes,
    document_info_from,
    next_version_name,
)

log = logging.getLogger(__name__)

_RETRYABLE = {429, 500, 502, 503, 504}
_STORE_ONLY = ("content_hash", "chunk_count", "splade", "body")
_MAX_WINDOW = 10_000


class OpenSearchStoreError(ServiceUnavailableError):
    """OpenSearch refused or could not complete a request."""


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


class OpenSearchIndex(SearchViaBatch):
    """BM25 and SPLADE retrieval plus the chunks themselves (fetch, document info)."""

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
            raise OpenSearchStoreError(f"OpenSearch unreachable during {what}: {error}") from None
        except TransportError as error:
            raise OpenSearchStoreError(
                f"OpenSearch refused {what}: {error.status_code} {error.error}"
            ) from None

    # -- lifecycle -----------------------------------------------------------------------
    async def _physical_indices(self) -> list[str]:
        try:
            return list(await self.client.indices.get(index=f"{self.alias}-v*"))
        except OpenSearchNotFound:
            return []

    async def _alias_target(self) -> str | None:
        try:
            found = await self.client.indices.get_alias(name=self.alias)
        except OpenSearchNotFound:
            return None
        return next(iter(found)) if found else None

    async def _create_version(self, models: IndexModels, old: str | None) -> str:
        name = next_version_name(self.alias, await self._physical_indices())
        await self._call(
            "index creation",
            self.client.indices.create(index=name, body=bodies.index_body(self.config, models)),
        )
        await self._call(
            "alias update",
            self.client.indices.update_aliases(
                body=bodies.alias_switch_body(self.alias, name, old)
            ),
        )
        return name

    async def open(self, models: IndexModels) -> None:
        target = await self._call("alias lookup", self._alias_target())
        if target is None:
            self.physical = await self._create_version(models, None)
            return
        mapping = await self._call("mapping lookup", self.client.indices.get_mapping(index=target))
        meta = mapping[target]["mappings"].get("_meta", {})
        stored = meta.get("models")
        stored_mapping = meta.get("mapping_version")
        if stored != models.as_dict() or stored_mapping != bodies.MAPPING_VERSION:
            if not self.migrate:
                raise ModelMismatchError(
                    f"OpenSearch index {target} (alias {self.alias}) was built with other models "
                    f"or mapping ({stored}, mapping v{stored_mapping} vs {models.as_dict()}, "
                    f"mapping v{bodies.MAPPING_VERSION}); set stores.migrate: true to create a "
                    "new index version behind the alias and re-ingest"
                )
            log.warning("models or mapping changed: new index version behind %s", self.alias)
            self.physical = await self._create_version(models, target)
            return
        self.physical = target

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def healthy(self) -> bool:
        try:
            return bool(await self.client.ping())
        except Exception:  # any failure means "not healthy"
            return False

    # -- writes --------------------------------------------------------------------------
    async def _bulk(self, actions: list[tuple[str, dict[str, Any]]]) -> None:
        pending = actions
        for attempt in range(self.config.max_retries + 1):
            body = bodies.bulk_index_actions(self.alias, pending)
            response = await self._call(
                "bulk indexing", self.client.bulk(body=body, refresh=self.config.refresh)
            )
            if not response.get("errors"):
                return
            retry, fatal = [], []
            for item, action in zip(response["items"], pending, strict=True):
                result = next(iter(item.values()))
                status = int(result.get("status", 500))
                if status < 300:
                    continue
                (retry if status in _RETRYABLE else fatal).append((action, result))
            if fatal:
                (chunk_id, _), result = fatal[0]
                raise OpenSearchStoreError(
                    f"OpenSearch rejected chunk {chunk_id}: {result.get('error')} "
                    f"({len(fatal)} item(s) rejected)"
                )
            pending = [action for action, _ in retry]
            if not pending:
                return
            await asyncio.sleep(self.config.retry_backoff_s * (2**attempt))
        raise OpenSearchStoreError(
            f"OpenSearch kept refusing {len(pending)} chunk(s) after "
            f"{self.config.max_retries} retries"
        )

    async def _delete_where(self, body: dict[str, Any]) -> int:
        response = await self._call(
            "delete by query",
            self.client.delete_by_query(
                index=self.alias, body=body, refresh=True, conflicts="proceed"
            ),
        )
        return int(response.get("deleted", 0))

    async def write_documents(self, tenant_id: str, writes: list[DocumentWrite]) -> int:
        actions = [
            (encoded.chunk.id, bodies.chunk_source(write, i))
            for write in writes
            for i, encoded in enumerate(write.chunks)
        ]
        size = self.config.bulk_batch_size
        for start in range(0, len(actions), size):
            await self._bulk(actions[start : start + size])
        removed = 0
        for write in writes:
            keep = [encoded.chunk.id for encoded in write.chunks]
            removed += await self._delete_where(
                bodies.selector_query(tenant_id, write.doc_id, keep_ids=keep)
            )
        return removed

    async def delete_document(self, tenant_id: str, doc_id: str) -> int:
        return await self._delete_where(bodies.selector_query(tenant_id, doc_id))

    # -- reads ---------------------------------------------------------------------------
    async def document_states(self, tenant_id: str, doc_ids: list[str]) -> DocumentStates:
        """Only documents stored under exactly one hash."""
        if not doc_ids:
            return {}
        response = await self._call(
            "document hashes",
            self.client.search(index=self.alias, body=bodies.hashes_query(tenant_id, doc_ids)),
        )
        states = {}
        for bucket in response["aggregations"]["docs"]["buckets"]:
            hashes = bucket["hashes"]["buckets"]
            if len(hashes) == 1:
                only = hashes[0]
                states[bucket["key"]] = (
                    only["key"],
                    int(only["doc_count"]),
                    int(only["expected"]["value"] or 0),
                )
        return states

    async def document_hashes(self, tenant_id: str, doc_ids: list[str]) -> dict[str, str]:
        """Hashes of documents stored completely (every chunk present, one version)."""
        return complete_hashes(await self.document_states(tenant_id, doc_ids))

    async def document_info(self, tenant_id: str, doc_id: str) -> DocumentInfo | None:
        response = await self._call(
            "document lookup",
            self.client.search(
                index=self.alias, body=bodies.document_query(tenant_id, doc_id, _MAX_WINDOW)
            ),
        )
        return document_info_from(
            tenant_id, doc_id, [h["_source"] for h in response["hits"]["hits"]]
        )

    def _body(
        self,
        strategy: Strategy,
        query: QueryVectors,
        limit: int,
        filters: list[dict[str, Any]],
    ) -> dict[str, Any] | None:
        if strategy == "bm25":
            if not query.text.strip():
                return None
            return bodies.bm25_query(self.config, query.text, limit, filters)
        if strategy == "splade":
            if query.splade is None:
                raise ValueError("splade search needs a splade query vector")
            return bodies.splade_query(self.config, query.splade, limit, filters)
        raise ValueError(f"OpenSearch does not serve the {strategy!r} strategy")

    async def search_many(
        self,
        strategies: list[Strategy],
        query: QueryVectors,
        limit: int,
        tenant_id: str,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[Hit]]:
        clauses = bodies.filter_clauses(tenant_id, filters)
        requests = {s: self._body(s, query, limit, clauses) for s in strategies}
        runnable = [s for s in strategies if requests[s] is not None]
        results: dict[str, list[Hit]] = {s: [] for s in strategies}
        if not runnable:
            return results
        # One round trip for every strategy of the query.
        lines: list[dict[str, Any]] = []
        for strategy in runnable:
            lines.extend(({"index": self.alias}, requests[strategy]))
        response = await self._call("search", self.client.msearch(body=lines))
        for strategy, item in zip(runnable, response["responses"], strict=True):
            if "error" in item:
                error = item["error"]
                reason = error.get("reason") if isinstance(error, dict) else error
                raise OpenSearchStoreError(f"OpenSearch {strategy} search failed: {reason}")
            results[strategy] = [
                Hit(h["_id"], h["_source"]["doc_id"], float(h["_score"]))
                for h in item["hits"]["hits"]
            ]
        return results

    async def fetch_sources(self, tenant_id: str, chunk_ids: list[str]) -> dict[str, dict]:
        if not chunk_ids:
            return {}
        response = await self._call(
            "fetch",
            self.client.mget(
                index=self.alias, body={"ids": list(chunk_ids)}, _source_excludes=["splade", "body"]
            ),
        )
        return {
            d["_id"]: d["_source"]
            for d in response["docs"]
            if d.get("found") and d["_source"].get("tenant_id") == tenant_id
        }

    async def fetch(self, tenant_id: str, chunk_ids: list[str]) -> list[Chunk]:
        sources = await self.fetch_sources(tenant_id, chunk_ids)
        return [source_to_chunk(sources[i]) for i in chunk_ids if i in sources]

    async def count(self, tenant_id: str | None = None) -> int:
        response = await self._call(
            "count", self.client.count(index=self.alias, body=bodies.count_query(tenant_id))
        )
        return int(response["count"])

    # -- snapshots -----------------------------------------------------------------------
    def _repository(self) -> str:
        if not self.config.snapshot_repository:
            raise ConfigError(
                "stores.opensearch.snapshot_repository is not set (register a snapshot "
                "repository in OpenSearch and name it there)"
            )
        return self.config.snapshot_repository

    async def create_snapshot(self, name: str) -> dict[str, Any]:
        repository = self._repository()
        response = await self._call(
            "snapshot creation",
            self.client.snapshot.create(
                repository=repository,
                snapshot=name,
                body=bodies.snapshot_body(self.physical or self.alias),
                wait_for_completion=True,
            ),
        )
        snapshot = response.get("snapshot", {})
        return {"store": "opensearch", "name": name, "state": snapshot.get("state")}

    async def list_snapshots(self) -> list[dict[str, Any]]:
        repository = self._repository()
        response = await self._call(
            "snapshot listing", self.client.snapshot.get(repository=repository, snapshot="_all")
        )
        return [
            {"store": "opensearch", "name": s["snapshot"], "state": s.get("state")}
            for s in response.get("snapshots", [])
        ]


def source_to_chunk(source: dict[str, Any]) -> Chunk:
    # Written from a validated Chunk by this adapter; trusted like the embedded payloads.
    data = {k: v for k, v in source.items() if k not in _STORE_ONLY}
    data["text"] = data.pop("content", "")
    return Chunk.model_construct(**data)
