"""The ChunkIndex contract (serve_app/testing/store_contract.py) on every topology, against
real engines: qdrant-edge (embedded), qdrant-client local mode (the Qdrant API) and
osmem-server (the OpenSearch REST API). Each class shares one store across its tests."""

from __future__ import annotations

import uuid

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


class TestQdrantServer(StoreContract):
    """The Qdrant backend's REST client against a server (tests/support/qdrant_rest_double.py):
    the path production takes, with its own request models and error statuses."""

    @pytest.fixture(scope="class")
    async def store(self, tmp_path_factory, qdrant_url):
        store = make_store(
            "qdrant",
            tmp_path_factory.mktemp("qdrant-server"),
            collection=f"chunks-{uuid.uuid4().hex[:8]}",
            qdrant_url=qdrant_url,
        )
        await store.open(MODELS)
        yield store
        await store.close()


class TestOpenSearchQdrantServers(StoreContract):
    @pytest.fixture(scope="class")
    async def store(self, tmp_path_factory, opensearch_url, qdrant_url):
        store = make_store(
            "opensearch+qdrant",
            tmp_path_factory.mktemp("split-servers"),
            opensearch_url,
            collection=f"chunks-{uuid.uuid4().hex[:8]}",
            qdrant_url=qdrant_url,
        )
        await store.open(MODELS)
        yield store
        await store.close()
