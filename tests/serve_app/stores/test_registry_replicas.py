"""The registry of named collections with several store replicas on one server topology.

Every store replica (a process of its own in production) opens the same stores and changes
the registry at the same moments; here each replica is a ``StoreIndex`` with clients of its
own, against the servers the production topologies use (osmem-server for OpenSearch, the
Qdrant REST double), their calls interleaved on one event loop. No change may be lost, a
name is created once, and the registry outlives a migration to a new version."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid

import pytest
from store_helpers import make_store, opensearch_config, write

from serve_app.errors import ConfigError, ConflictError, NotFoundError
from serve_app.schemas import ScopeKey
from serve_app.stores.registry import registry_key
from serve_app.testing.store_contract import MODELS, encoded
from tests.support.qdrant_rest_double import QdrantRestDouble

REPLICAS = 4
TOPOLOGIES = ["qdrant", "opensearch+qdrant"]


def replicas(topology, tmp_path, opensearch_url, qdrant_url, alias, count=REPLICAS, **kw):
    return [
        make_store(
            topology,
            tmp_path / f"{alias}-{i}",
            opensearch_url,
            collection=alias,
            os_config=opensearch_config(opensearch_url, index=alias),
            qdrant_url=qdrant_url,
            **kw,
        )
        for i in range(count)
    ]


@contextlib.asynccontextmanager
async def opened(*args, models=MODELS, **kw):
    """``replicas(*args, **kw)``, opened together, closed whatever the test does."""
    stores = replicas(*args, **kw)
    try:
        await asyncio.gather(*(store.open(models) for store in stores))
        yield stores
    finally:
        for store in stores:
            await store.close()


async def names(store, tenant):
    return [c["name"] for c in await store.list_collections(ScopeKey(tenant))]


@pytest.mark.parametrize("topology", TOPOLOGIES)
async def test_collections_created_and_deleted_at_once_through_every_replica_are_all_kept(
    topology, tmp_path, opensearch_url, qdrant_url
):
    alias = f"reg-{uuid.uuid4().hex[:8]}"
    async with opened(topology, tmp_path, opensearch_url, qdrant_url, alias) as stores:
        wanted = [f"c{r}-{i}" for r in range(REPLICAS) for i in range(5)]
        await asyncio.gather(
            *(stores[int(name[1])].create_collection(ScopeKey("t", name)) for name in wanted)
        )
        for store in stores:
            assert sorted(await names(store, "t")) == sorted(["default", *wanted])
        # half of them deleted at once, each through another replica than created it
        gone = wanted[::2]
        await asyncio.gather(
            *(
                stores[(int(name[1]) + 1) % REPLICAS].delete_collection(ScopeKey("t", name))
                for name in gone
            )
        )
        kept = sorted(set(wanted) - set(gone))
        for store in stores:
            assert sorted(await names(store, "t")) == sorted(["default", *kept])
            assert all([await store.has_collection(ScopeKey("t", n)) for n in kept])
            assert not any([await store.has_collection(ScopeKey("t", n)) for n in gone])


@pytest.mark.parametrize("topology", TOPOLOGIES)
async def test_one_name_created_at_once_through_every_replica_is_created_once(
    topology, tmp_path, opensearch_url, qdrant_url
):
    alias = f"once-{uuid.uuid4().hex[:8]}"
    async with opened(topology, tmp_path, opensearch_url, qdrant_url, alias) as stores:
        for attempt in range(3):
            name = f"papers{attempt}"
            results = await asyncio.gather(
                *(store.create_collection(ScopeKey("t", name)) for store in stores),
                return_exceptions=True,
            )
            created = [r for r in results if isinstance(r, dict)]
            refused = [r for r in results if isinstance(r, ConflictError)]
            assert len(created) == 1 and len(refused) == REPLICAS - 1, results
            # and it stays created: a later creation, through any replica, is refused
            with pytest.raises(ConflictError, match="exists already"):
                await stores[attempt].create_collection(ScopeKey("t", name))
        # and deleting one name through every replica at once removes it once, cleanly
        results = await asyncio.gather(
            *(store.delete_collection(ScopeKey("t", "papers0")) for store in stores),
            return_exceptions=True,
        )
        assert all(isinstance(r, int | NotFoundError) for r in results), results
        assert await names(stores[1], "t") == ["default", "papers1", "papers2"]
        created = await stores[2].create_collection(
            ScopeKey("t", "papers0")
        )  # the name is free again
        assert created["name"] == "papers0"


@pytest.mark.parametrize("topology", TOPOLOGIES)
async def test_a_collection_being_deleted_cannot_be_created_again_until_it_is_gone(
    topology, tmp_path, opensearch_url, qdrant_url
):
    alias = f"del-{uuid.uuid4().hex[:8]}"
    async with opened(topology, tmp_path, opensearch_url, qdrant_url, alias, count=2) as (
        first,
        second,
    ):
        await first.create_collection(ScopeKey("t", "papers"))
        chunk = encoded("d1", 0, "alpha", [1, 0, 0, 0], {1: 1.0}, tenant="t", collection="papers")
        await first.write_documents(ScopeKey("t", "papers"), [write("d1", [chunk])])
        key = registry_key(ScopeKey("t", "papers"))
        record = await first.chunk_store.registry_record(key)
        await first.chunk_store.update_registry_record(key, {**record, "state": "deleting"})
        with pytest.raises(ConflictError, match="being deleted"):
            await second.create_collection(ScopeKey("t", "papers"))
        assert not await second.has_collection(ScopeKey("t", "papers"))
        assert await second.delete_collection(ScopeKey("t", "papers")) == 1  # a retry finishes it
        assert await first.count(ScopeKey("t", "papers")) == 0
        # an update of a record that is gone does not bring it back
        assert not await first.chunk_store.update_registry_record(key, record)
        assert await names(first, "t") == ["default"]


@pytest.mark.parametrize("topology", TOPOLOGIES)
async def test_the_registry_outlives_a_migration_to_a_new_version(
    topology, tmp_path, opensearch_url, qdrant_url
):
    alias = f"mig-{uuid.uuid4().hex[:8]}"
    async with opened(topology, tmp_path, opensearch_url, qdrant_url, alias, count=1) as (before,):
        await before.create_collection(ScopeKey("t", "papers"))
    other = dataclasses.replace(MODELS, dense_model="another-model")
    async with opened(
        topology, tmp_path, opensearch_url, qdrant_url, alias, count=1, migrate=True, models=other
    ) as (after,):
        assert {b.connection.physical for b in after.backends} == {f"{alias}-v2"}
        assert await names(after, "t") == ["default", "papers"]
        assert await after.has_collection(ScopeKey("t", "papers"))


async def test_a_qdrant_server_that_would_ignore_insert_only_is_refused_at_open(
    tmp_path, opensearch_url
):
    """Before 1.17 Qdrant ignores upsert's update_mode: a second creation of a name would
    overwrite its record, so such a server is refused with the reason, not half-served."""
    old = QdrantRestDouble(version="1.16.2")
    url = old.start()
    try:
        alias = f"v-{uuid.uuid4().hex[:8]}"
        (store,) = replicas("qdrant", tmp_path, opensearch_url, url, alias, 1)
        with pytest.raises(ConfigError, match=r"Qdrant 1\.16\.2 is too old"):
            await store.open(MODELS)
        await store.close()
    finally:
        old.close()


@pytest.mark.parametrize("ours", [True, False])
async def test_an_opensearch_create_retried_after_it_landed_is_still_its_own(
    ours, tmp_path, opensearch_url, monkeypatch
):
    """The client retries a create that timed out; when the first attempt had landed, the
    retry is answered 409, and the record's claim tells whether it was this call's."""
    from serve_app.stores.opensearch import registry as opensearch_registry

    alias = f"retry-{uuid.uuid4().hex[:8]}"
    async with opened("opensearch+qdrant", tmp_path, opensearch_url, None, alias, 1) as (store,):
        backend = store.chunk_store
        key = registry_key(ScopeKey("t", "papers"))
        landed = uuid.UUID(int=7)
        await backend.connection.client.create(
            index=backend.connection.registry_index,
            id=key,
            body={"key": key, "claim": landed.hex, "tenant_id": "t", "name": "papers"},
            refresh="true",
        )
        claim = landed if ours else uuid.UUID(int=8)
        monkeypatch.setattr(opensearch_registry.uuid, "uuid4", lambda: claim)
        record = {"tenant_id": "t", "name": "papers", "state": "ready"}
        assert await backend.insert_registry_record(key, record) is ours
