"""Store replicas scale on the server topology: two replicas of the store deployment, started
together against the same OpenSearch (osmem-server) and Qdrant (the REST double, holding
each replica's collection creation until both are inside it, so that their openings race),
each open the stores themselves, agree on one version behind each alias, and serve one
shared index: a write through one replica is read through the other, collections created
at once through both are all kept (and one name is created once), and Ray's own
per-replica request metrics show that both served."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from pathlib import Path

import pytest
from ray_metrics import metric_lines, ray_metrics

from serve_app.errors import ConflictError
from serve_app.schemas import ScopeKey
from serve_app.stores.one_query import search
from serve_app.stores.versioning import versioned_names
from serve_app.testing.store_contract import MODELS, corpus, query
from tests.support.qdrant_rest_double import QdrantRestDouble

APP = "store-replicas"
REPLICAS = 2


@pytest.fixture(scope="module")
def racing_qdrant():
    double = QdrantRestDouble(hold_creates=REPLICAS, hold_timeout_s=180)
    try:
        yield double, double.start()
    finally:
        double.close()


@pytest.fixture(scope="module")
def store_pair(serve_url, app_config_factory, opensearch_url, racing_qdrant):
    from ray import serve

    from deployments.replicas.store import StoreDeployment
    from deployments.settings import service_config

    alias = f"replicas-{uuid.uuid4().hex[:8]}"
    config = service_config(
        app_config_factory(
            stores={
                "topology": "opensearch+qdrant",
                "opensearch": {"hosts": [opensearch_url], "index": alias, "number_of_replicas": 0},
                "qdrant": {"url": racing_qdrant[1], "collection": alias},
            }
        )
    )
    store = StoreDeployment.options(
        name="store",
        num_replicas=REPLICAS,
        max_ongoing_requests=2,  # concurrent calls must spread over the replicas
        ray_actor_options={"num_cpus": 0},
    ).bind(config, MODELS.as_dict())
    serve.run(store, name=APP, route_prefix=None)
    yield serve.get_deployment_handle("store", APP), alias
    serve.delete(APP)


@pytest.mark.asyncio(loop_scope="session")  # the handle is bound to the fixtures' loop
async def test_two_store_replicas_open_themselves_and_share_one_index(
    store_pair, opensearch_url, racing_qdrant
):
    from ray import serve
    from ray._private import state as ray_state

    from deployments.replicas.store_seam import RemoteIndex
    from serve_app.config import OpenSearchConfig, QdrantConfig
    from serve_app.stores.opensearch import OpenSearchBackend
    from serve_app.stores.qdrant import QdrantBackend
    from serve_app.stores.qdrant.connection import QdrantConnection

    handle, alias = store_pair
    status = serve.status().applications[APP].deployments["store"]
    assert status.status == "HEALTHY" and status.replica_states.get("RUNNING") == REPLICAS
    # No replica failed its start and was replaced: the GCS actor table (dead actors kept;
    # the state API would need the dashboard, which the local run does not start).
    actors = [
        a for a in ray_state.actors().values() if a["ActorClassName"] == f"ServeReplica:{APP}:store"
    ]
    assert sorted(a["State"] for a in actors) == ["ALIVE"] * REPLICAS, actors

    # Both replicas were inside the creation of the first Qdrant version at once (the race
    # happened), and they agree: one version in each store, the alias on it.
    creations = racing_qdrant[0].requests.count(("PUT", f"/collections/{alias}-v1"))
    assert creations == REPLICAS, racing_qdrant[0].requests
    backends = [
        OpenSearchBackend(OpenSearchConfig(hosts=[opensearch_url], index=alias)),
        QdrantBackend(QdrantConnection(QdrantConfig(url=racing_qdrant[1], collection=alias), Path("."))),
    ]
    try:
        for backend in backends:
            assert versioned_names(alias, await backend.connection.version_names()) == [f"{alias}-v1"]
            assert await backend.connection.alias_target() == f"{alias}-v1"
    finally:
        for backend in backends:
            await backend.close()

    index = RemoteIndex(handle, await handle.info.remote())
    await index.open(MODELS)
    t1, t2 = ScopeKey(f"t1-{uuid.uuid4().hex[:6]}"), ScopeKey(f"t2-{uuid.uuid4().hex[:6]}")
    for tenant, writes in corpus(t1, t2):
        await index.write_documents(tenant, writes)

    async def read() -> tuple[int, list[str]]:
        hits = await search(index, "dense", query(), 10, t1)
        return await index.count(t1), [h.chunk_id for h in hits]

    answers = await asyncio.gather(*(read() for _ in range(24)))
    assert {count for count, _ in answers} == {3}
    assert len({tuple(ids) for _, ids in answers}) == 1 and answers[0][1]

    # The registry of named collections, changed at once through both replica processes:
    # no creation lost, and one name created at once through both is created once.
    wanted = [f"c{i}" for i in range(12)]
    await asyncio.gather(*(index.create_collection(ScopeKey(t1.tenant, name)) for name in wanted))
    listed = [c["name"] for c in await index.list_collections(t1)]
    assert sorted(listed) == sorted(["default", *wanted])
    results = await asyncio.gather(
        *(index.create_collection(ScopeKey(t2.tenant, "papers")) for _ in range(6)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, dict) for r in results) == 1, results
    assert sum(isinstance(r, ConflictError) for r in results) == 5, results

    # Replicas report to the node's agent every few seconds: read until both have.
    deadline, served, lines = time.time() + 60, {}, []
    while len(served) < REPLICAS and time.time() < deadline:
        lines = ray_metrics(["serve_deployment_request_counter"])
        served = {}
        for line in metric_lines(lines, "serve_deployment_request_counter", f'"{APP}"'):
            replica = re.search(r'replica="([^"]+)"', line)
            if replica:
                count = float(line.split()[-1])
                served[replica.group(1)] = served.get(replica.group(1), 0) + count
        if len(served) < REPLICAS:
            await asyncio.sleep(2)
    assert len(served) == REPLICAS and all(count > 0 for count in served.values()), served
    # The only errors are the 5 refused creations (a ConflictError is an error to Serve).
    deadline, errors = time.time() + 60, []
    while time.time() < deadline:
        errors = metric_lines(
            ray_metrics(["serve_deployment_error_counter"]),
            "serve_deployment_error_counter",
            f'"{APP}"',
        )
        if sum(float(line.split()[-1]) for line in errors) >= 5:
            break
        await asyncio.sleep(2)
    assert sum(float(line.split()[-1]) for line in errors) == 5, errors
