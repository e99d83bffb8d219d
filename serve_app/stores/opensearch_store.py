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
import uuid
from typing import Any, cast

from opensearchpy import AsyncOpenSearch
from opensearchpy.exceptions import ConflictError as OpenSearchConflict
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError
from opensearchpy.exceptions import NotFoundError as OpenSearchNotFound
from opensearchpy.exceptions import TransportError

from serve_app.config import OpenSearchConfig
from serve_app.errors import ConfigError, NotFoundError, ServiceUnavailableError
from serve_app.schemas import Chunk, Strategy
from serve_app.stores import opensearch_bodies as bodies
from serve_app.stores.registry import registry_fields, registry_name
from serve_app.stores.scope import SCOPE_FIELDS, ScopeKey, in_scope
from serve_app.stores.values import DocumentStates, DocumentWrite, Hit, IndexModels, StrategyQuery
from serve_app.stores.versioning import VersionTaken, open_versioned, versioned_names

log = logging.getLogger(__name__)

_RETRYABLE = {429, 500, 502, 503, 504}
_REGISTRY_PAGE = 1000
_ABSENT = object()
_TAKEN = object()
_STORE_ONLY = (*SCOPE_FIELDS, "content_hash", "chunk_count", "splade", "body")
_MAX_WINDOW = 10_000
_PAGE = 1000


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


class OpenSearchBackend:
    """BM25 and SPLADE retrieval plus the chunks themselves (fetch, document info)."""

    name = "opensearch"
    kind = "OpenSearch index"
    strategies: tuple[Strategy, ...] = ("bm25", "splade")
    holds_chunks = True

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
        self.physical = await self._call("alias lookup", self.alias_target())
        if self.physical is None:
            raise NotFoundError(
                f"no {self.kind} behind the alias {self.alias!r} (stores.opensearch.index)"
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
            retry: list[tuple[Any, Any]] = []
            fatal: list[tuple[Any, Any]] = []
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

    async def upsert(self, scope: ScopeKey, writes: list[DocumentWrite]) -> None:
        actions = [
            (encoded.chunk.id, bodies.chunk_source(scope, write, i))
            for write in writes
            for i, encoded in enumerate(write.chunks)
        ]
        size = self.config.bulk_batch_size
        for start in range(0, len(actions), size):
            await self._bulk(actions[start : start + size])

    async def _delete_where(self, body: dict[str, Any]) -> int:
        response = await self._call(
            "delete by query",
            self.client.delete_by_query(
                index=self.alias, body=body, refresh=True, conflicts="proceed"
            ),
        )
        return int(response.get("deleted", 0))

    async def delete_ids(self, scope: ScopeKey, chunk_ids: list[str]) -> None:
        await self._delete_where(bodies.ids_query(scope, chunk_ids))

    async def delete_documents(self, scope: ScopeKey, doc_ids: list[str]) -> int:
        return await self._delete_where(bodies.documents_query(scope, doc_ids))

    # -- reads ---------------------------------------------------------------------------
    async def _sources(self, body: dict[str, Any], what: str) -> list[dict[str, Any]]:
        """Every hit of ``body`` (id and source), paged by ``search_after`` on the chunk id."""
        hits: list[dict[str, Any]] = []
        after: list[Any] | None = None
        while True:
            page_body = {**body, "size": _PAGE, "sort": ["id"]}
            if after is not None:
                page_body["search_after"] = after
            response = await self._call(what, self.client.search(index=self.alias, body=page_body))
            page = response["hits"]["hits"]
            hits.extend(page)
            if len(page) < _PAGE:
                return hits
            after = page[-1]["sort"]

    async def chunk_ids(self, scope: ScopeKey, doc_ids: list[str]) -> dict[str, set[str]]:
        if not doc_ids:
            return {}
        held: dict[str, set[str]] = {}
        body = {**bodies.documents_query(scope, doc_ids), "_source": ["doc_id"]}
        for hit in await self._sources(body, "chunk listing"):
            held.setdefault(hit["_source"]["doc_id"], set()).add(hit["_id"])
        return held

    async def document_states(self, scope: ScopeKey, doc_ids: list[str]) -> DocumentStates:
        """Only documents stored under exactly one hash."""
        if not doc_ids:
            return {}
        response = await self._call(
            "document hashes",
            self.client.search(index=self.alias, body=bodies.hashes_query(scope, doc_ids)),
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

    async def document_payloads(self, scope: ScopeKey, doc_id: str) -> list[dict[str, Any]]:
        response = await self._call(
            "document lookup",
            self.client.search(
                index=self.alias, body=bodies.document_query(scope, doc_id, _MAX_WINDOW)
            ),
        )
        return [h["_source"] for h in response["hits"]["hits"]]

    def _body(self, query: StrategyQuery) -> dict[str, Any] | None:
        clauses = bodies.filter_clauses(query.scope, query.filters)
        if query.strategy == "bm25":
            if not query.query.text.strip():
                return None
            return bodies.bm25_query(self.config, query.query.text, query.limit, clauses)
        if query.strategy == "splade":
            if query.query.splade is None:
                raise ValueError("splade search needs a splade query vector")
            return bodies.splade_query(self.config, query.query.splade, query.limit, clauses)
        raise ValueError(f"OpenSearch does not serve the {query.strategy!r} strategy")

    async def query(self, queries: list[StrategyQuery]) -> list[list[Hit]]:
        requests = [self._body(q) for q in queries]
        runnable = [i for i, body in enumerate(requests) if body is not None]
        results: list[list[Hit]] = [[] for _ in queries]
        if not runnable:
            return results
        # One round trip for every strategy of every query of the batch.
        lines: list[dict[str, Any]] = []
        for i in runnable:
            lines.extend(({"index": self.alias}, cast(dict[str, Any], requests[i])))
        response = await self._call("search", self.client.msearch(body=lines))
        for i, item in zip(runnable, response["responses"], strict=True):
            if "error" in item:
                error = item["error"]
                reason = error.get("reason") if isinstance(error, dict) else error
                raise OpenSearchStoreError(
                    f"OpenSearch {queries[i].strategy} search failed: {reason}"
                )
            results[i] = [
                Hit(h["_id"], h["_source"]["doc_id"], float(h["_score"]))
                for h in item["hits"]["hits"]
            ]
        return results

    async def _mget(
        self, requests: list[tuple[ScopeKey, list[str]]], source: Any
    ) -> list[dict[str, dict[str, Any]]]:
        wanted = list(dict.fromkeys(i for _, ids in requests for i in ids))
        if not wanted:
            return [{} for _ in requests]
        response = await self._call(
            "fetch", self.client.mget(index=self.alias, body={"ids": wanted}, **source)
        )
        by_id = {d["_id"]: d["_source"] for d in response["docs"] if d.get("found")}
        return [
            {i: by_id[i] for i in ids if i in by_id and in_scope(by_id[i], key)}
            for key, ids in requests
        ]

    async def present(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[set[str]]:
        found = await self._mget(requests, {"_source_includes": SCOPE_FIELDS})
        return [set(f) for f in found]

    async def chunks(self, requests: list[tuple[ScopeKey, list[str]]]) -> list[dict[str, Chunk]]:
        found = await self._mget(requests, {"_source_excludes": ["splade", "body"]})
        return [{i: source_to_chunk(s) for i, s in f.items()} for f in found]

    async def count(self, scope: ScopeKey | None) -> int:
        response = await self._call(
            "count", self.client.count(index=self.alias, body=bodies.count_query(scope))
        )
        return int(response["count"])

    async def scroll_payloads(
        self, scope: ScopeKey | None, fields: list[str] | None, offset: Any, limit: int
    ) -> tuple[list[tuple[str, dict[str, Any]]], Any]:
        body: dict[str, Any] = {
            **bodies.count_query(scope),
            "_source": fields if fields is not None else {"excludes": ["splade"]},
            "size": limit,
            "sort": ["id"],
        }
        if offset is not None:
            body["search_after"] = offset
        response = await self._call("listing", self.client.search(index=self.alias, body=body))
        hits = response["hits"]["hits"]
        page = [(h["_id"], h["_source"]) for h in hits]
        return page, (hits[-1]["sort"] if len(hits) == limit else None)

    async def delete_scope(self, scope: ScopeKey) -> int:
        return await self._delete_where(bodies.count_query(scope))

    # -- inspection and the collection registry (in the mapping's ``_meta``) -------------
    async def _meta(self, index: str) -> dict[str, Any]:
        mapping = await self._call("mapping read", self.client.indices.get_mapping(index=index))
        return dict(next(iter(mapping.values()))["mappings"].get("_meta", {}))

    async def describe(self) -> dict[str, Any]:
        physical = await self._call("alias lookup", self.alias_target())
        versions = versioned_names(self.alias, await self._call("listing", self.version_names()))
        mapping = await self._call(
            "mapping read", self.client.indices.get_mapping(index=self.alias)
        )
        mappings = next(iter(mapping.values()))["mappings"]
        count = await self.count(None)
        disk = None
        try:
            stats = await self.client.indices.stats(index=self.alias, metric="store")
            disk = int(stats["_all"]["primaries"]["store"]["size_in_bytes"])
        except (TransportError, KeyError, TypeError, ValueError):
            pass  # some deployments do not expose index stats to this user
        meta = mappings.get("_meta", {})
        return {
            "store": self.name,
            "location": ", ".join(self.config.hosts),
            "alias": self.alias,
            "physical": physical,
            "versions": versions,
            "binding": meta.get("models"),
            "mapping_version": meta.get("mapping_version"),
            "points": count,
            "payload_indexes": bodies.indexed_fields(mappings.get("properties", {})),
            "disk_bytes": disk,
        }

    # -- the collection registry (an index of its own beside the alias) -----------------
    @property
    def registry_index(self) -> str:
        return registry_name(self.alias)

    async def open_registry(self) -> None:
        if not await self._call(
            "registry lookup", self.client.indices.exists(index=self.registry_index)
        ):
            await self._registry_call("creation", self._create_registry())

    async def _create_registry(self) -> None:
        try:
            await self.client.indices.create(
                index=self.registry_index, body=bodies.registry_body(self.config)
            )
        except TransportError as error:
            if error.error != "resource_already_exists_exception":
                raise
            # another replica created it meanwhile

    async def _registry_call(self, what: str, coro: Any) -> Any:
        """The call's answer; ``_ABSENT`` for a 404 (no such record, or no registry index
        yet: an index opened by an earlier version), ``_TAKEN`` for a 409."""

        async def answer() -> Any:
            try:
                return await coro
            except OpenSearchNotFound:
                return _ABSENT
            except OpenSearchConflict:
                return _TAKEN

        return await self._call(f"registry {what}", answer())

    async def registry_records(self, tenant_id: str | None) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        after: str | None = None
        while True:
            body = bodies.registry_page(tenant_id, after, _REGISTRY_PAGE)
            response = await self._registry_call(
                "read", self.client.search(index=self.registry_index, body=body)
            )
            if response is _ABSENT:
                return []
            hits = response["hits"]["hits"]
            records += [registry_fields(hit["_source"]) for hit in hits]
            if len(hits) < _REGISTRY_PAGE:
                return records
            after = hits[-1]["_source"]["key"]

    async def registry_record(self, key: str) -> dict[str, Any] | None:
        # A GET by id is real-time: it sees the latest write, refreshed or not.
        found = await self._registry_call(
            "read", self.client.get(index=self.registry_index, id=key)
        )
        return None if found is _ABSENT else registry_fields(found["_source"])

    async def insert_registry_record(self, key: str, record: dict[str, Any]) -> bool:
        # op_type=create: OpenSearch's atomic create-once (409 when the id exists). The
        # client retries a request that timed out, and the retry of a create that had
        # succeeded answers 409 too: whose record it is, is read from its claim.
        # refresh: the next listing (a search) sees it.
        claim = uuid.uuid4().hex
        body = {"key": key, "claim": claim, **registry_fields(record)}
        created = await self._registry_call(
            "write",
            self.client.create(index=self.registry_index, id=key, body=body, refresh="true"),
        )
        if created is _ABSENT:
            raise OpenSearchStoreError(f"no registry index {self.registry_index} (removed?)")
        if created is not _TAKEN:
            return True
        held = await self._registry_call("read", self.client.get(index=self.registry_index, id=key))
        return held is not _ABSENT and held["_source"].get("claim") == claim

    async def update_registry_record(self, key: str, fields: dict[str, Any]) -> bool:
        # A partial update of an absent document is refused (404), never an insert;
        # concurrent updates of one record are retried by OpenSearch, not answered 409.
        updated = await self._registry_call(
            "write",
            self.client.update(
                index=self.registry_index,
                id=key,
                body={"doc": registry_fields(fields)},
                refresh="true",
                retry_on_conflict=3,
            ),
        )
        return updated is not _ABSENT

    async def drop_registry_record(self, key: str) -> None:
        await self._registry_call(
            "write", self.client.delete(index=self.registry_index, id=key, refresh="true")
        )

    # -- snapshots (Snapshots protocol) ----------------------------------------------------
    def _repository(self) -> str:
        if not self.config.snapshot_repository:
            raise ConfigError(
                "stores.opensearch.snapshot_repository is not set (register a snapshot "
                "repository in OpenSearch and name it there)"
            )
        return self.config.snapshot_repository

    async def _snapshot_indices(self) -> list[str]:
        """The chunk index and, where it exists, the registry: a snapshot restores both."""
        indices = [self.physical or self.alias]
        if await self._call(
            "registry lookup", self.client.indices.exists(index=self.registry_index)
        ):
            indices.append(self.registry_index)
        return indices

    async def create_snapshot(self, name: str) -> dict[str, Any]:
        repository = self._repository()
        response = await self._call(
            "snapshot creation",
            self.client.snapshot.create(
                repository=repository,
                snapshot=name,
                body=bodies.snapshot_body(await self._snapshot_indices()),
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
