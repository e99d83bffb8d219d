"""Store replicas open the same stores at once (a fresh install starts every store replica
together): whatever the interleaving, they must agree on one version behind each alias,
create no second version, and each serve the others' writes.

Against the servers the production topologies use: osmem-server (OpenSearch REST) and the
Qdrant REST double, whose collection creation is slowed so that openers race inside it."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest
from store_helpers import make_store, opensearch_config, write

from serve_app.errors import ModelMismatchError
from serve_app.schemas import ScopeKey
from serve_app.stores.versioning import versioned_names
from serve_app.testing.store_contract import MODELS, encoded, query
from tests.support.qdrant_rest_double import QdrantRestDouble

OPENERS = 4


@pytest.fixture
def slow_qdrant():
    double = QdrantRestDouble(slow_creates_s=0.2)
    try:
        yield double.start()
    finally:
        double.close()


def openers(topology, tmp_path, opensearch_url, qdrant_url, alias, count):
    """``count`` stores of ``topology`` on the same servers and names: separate replicas."""
    return [
        make_store(
            topology,
            tmp_path / str(i),
            opensearch_url,
            collection=alias,
            os_config=opensearch_config(opensearch_url, index=alias),
            qdrant_url=qdrant_url,
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("topology", ["qdrant", "opensearch+qdrant"])
async def test_concurrent_openers_agree_on_one_version(
    topology, tmp_path, opensearch_url, slow_qdrant
):
    alias = f"race-{uuid.uuid4().hex[:8]}"
    stores = openers(topology, tmp_path, opensearch_url, slow_qdrant, alias, OPENERS)
    try:
        await asyncio.gather(*(store.open(MODELS) for store in stores))
        for position in range(len(stores[0].backends)):
            backends = [store.backends[position] for store in stores]
            versions = versioned_names(alias, await backends[0].connection.version_names())
            assert versions == [f"{alias}-v1"], backends[0].name
            assert await backends[0].connection.alias_target() == f"{alias}-v1"
            assert {b.connection.physical for b in backends} == {f"{alias}-v1"}
        chunk = encoded("d1", 0, "alpha beta", [1, 0, 0, 0], {1: 1.0}, tenant="t")
        await stores[0].write_documents(ScopeKey("t"), [write("d1", [chunk])])
        for store in stores[1:]:
            assert await store.count(ScopeKey("t")) == 1
            hits = await store.search("dense", query(), 5, ScopeKey("t"))
            assert [h.doc_id for h in hits] == ["d1"]
    finally:
        for store in stores:
            await store.close()


@pytest.mark.parametrize("topology", ["qdrant", "opensearch+qdrant"])
async def test_openers_with_other_models_get_the_model_guard_error(
    topology, tmp_path, opensearch_url, slow_qdrant
):
    """Two openers with different models race on a fresh install (a misconfiguration): one
    wins, the other is refused by the model guard rather than left on a version of its own
    that the alias does not point to."""
    alias = f"models-{uuid.uuid4().hex[:8]}"
    other = dataclasses.replace(MODELS, dense_model="another-model")
    stores = openers(topology, tmp_path, opensearch_url, slow_qdrant, alias, 2)
    try:
        results = await asyncio.gather(
            stores[0].open(MODELS), stores[1].open(other), return_exceptions=True
        )
        # Each store's winner may differ (in the split topology one opener can win OpenSearch
        # and the other Qdrant, and then both are refused); never two versions, never an
        # opener left on a version that the alias does not point to.
        assert all(r is None or isinstance(r, ModelMismatchError) for r in results), results
        assert any(isinstance(r, ModelMismatchError) for r in results), results
        for position in range(len(stores[0].backends)):
            backend = stores[0].backends[position]
            assert versioned_names(alias, await backend.connection.version_names()) == [f"{alias}-v1"]
            assert await backend.connection.alias_target() == f"{alias}-v1"
        for store, result in zip(stores, results, strict=True):
            if result is None:
                assert {b.connection.physical for b in store.backends} == {f"{alias}-v1"}
    finally:
        for store in stores:
            await store.close()


@pytest.mark.parametrize("topology", ["qdrant", "opensearch+qdrant"])
async def test_a_version_left_without_its_alias_is_adopted(
    topology, tmp_path, opensearch_url, qdrant_url
):
    """An opener that died between creating a version and moving the alias leaves a version
    nothing points to; the next opener with the same models takes it, not a second one."""
    alias = f"orphan-{uuid.uuid4().hex[:8]}"

    died, opener = openers(topology, tmp_path, opensearch_url, qdrant_url, alias, 2)
    for backend in died.backends:
        await backend.connection.create_version(f"{alias}-v1", MODELS)
        assert await backend.connection.alias_target() is None
    try:
        await opener.open(MODELS)
        for backend in opener.backends:
            assert versioned_names(alias, await backend.connection.version_names()) == [f"{alias}-v1"]
            assert await backend.connection.alias_target() == backend.connection.physical == f"{alias}-v1"
    finally:
        await opener.close()
        await died.close()


async def test_a_refused_open_returns_only_once_every_store_has_settled(
    tmp_path, opensearch_url, slow_qdrant
):
    """Split topology: OpenSearch refuses at once (built with other models) while Qdrant's
    open is still creating its version (creations take 0.2 s here). The refusal reaches the
    caller only after Qdrant's open has finished, not while it goes on behind the caller's
    back (a caller that closes its clients on the error would cut it half-way)."""
    alias = f"settle-{uuid.uuid4().hex[:8]}"
    other = dataclasses.replace(MODELS, dense_model="another-model")
    first, second = openers("opensearch+qdrant", tmp_path, opensearch_url, slow_qdrant, alias, 2)
    try:
        (search_engine,) = [b for b in second.backends if b.name == "opensearch"]
        await search_engine.open(other)
        with pytest.raises(ModelMismatchError):
            await first.open(MODELS)
        (vectors,) = [b for b in first.backends if b.name == "qdrant"]
        assert await vectors.connection.alias_target() == f"{alias}-v1"
    finally:
        for store in (first, second):
            await store.close()
