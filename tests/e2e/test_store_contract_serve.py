"""The ServedIndex contract through Ray Serve: a real store deployment (its own Serve
application beside the e2e app, embedded topology in a fresh directory) behind the generic
typed seam the ingress uses (deployments.replicas.store_seam.RemoteIndex)."""

from __future__ import annotations

import pytest

from serve_app.testing.store_contract import MODELS, StoreContract


@pytest.fixture(scope="module")
def store_app(serve_url, app_config_factory):
    from ray import serve

    from deployments.replicas.store import StoreDeployment
    from deployments.settings import service_config

    config = service_config(app_config_factory())
    store = StoreDeployment.options(name="store", ray_actor_options={"num_cpus": 0}).bind(
        config, MODELS.as_dict()
    )
    serve.run(store, name="store-contract", route_prefix=None)
    yield serve.get_deployment_handle("store", "store-contract")
    serve.delete("store-contract")


class TestThroughServe(StoreContract):
    @pytest.fixture(scope="class")
    async def store(self, store_app):
        from deployments.replicas.store_seam import RemoteIndex

        index = RemoteIndex(store_app, await store_app.info.remote())
        await index.open(MODELS)
        return index


@pytest.mark.asyncio(loop_scope="session")  # the handle is bound to the fixtures' loop
async def test_the_seam_implements_the_served_protocol(store_app):
    from deployments.replicas.store_seam import RemoteIndex
    from serve_app.stores.base import ServedIndex

    index = RemoteIndex(store_app, await store_app.info.remote())
    assert isinstance(index, ServedIndex)
