"""The ChunkIndex contract (serve_app/testing/store_contract.py) on every topology, against
real engines: qdrant-edge (embedded), qdrant-client local mode (the Qdrant API) and
osmem-server (the OpenSearch REST API). Each class shares one store across its tests."""

from __future__ import annotations

import pytest
from store_helpers import make_store

from serve_app.testing.store_contract import MODELS, StoreContract


async def _opened(topology, tmp_path_factory, opensearch_url=None):
    store = make_store(
        topology, tmp_path_factory.mktemp(topology.replace("+", "-")), opensearch_url
    )
    await store.open(MODELS)
    return store


class TestEmbedded(StoreContract):
    @pytest.fixture(scope="class")
    async def store(self, tmp_path_factory):
        store = await _opened("embedded", tmp_path_factory)
        yield store
        await store.close()


class TestQdrant(StoreContract):
    @pytest.fixture(scope="class")
    async def store(self, tmp_path_factory):
        store = await _opened("qdrant", tmp_path_factory)
        yield store
        await store.close()


class TestOpenSearchQdrant(StoreContract):
    @pytest.fixture(scope="class")
    async def store(self, tmp_path_factory, opensearch_url):
        store = await _opened("opensearch+qdrant", tmp_path_factory, opensearch_url)
        yield store
        await store.close()
