"""What differs between topologies by design, on real engines (qdrant-client local mode,
osmem-server): BM25 (vectors with per-tenant IDF in Qdrant, analysed text in OpenSearch), the
model guard and migration behind versioned aliases, and each store's index settings. The
behaviour every topology shares is the contract suite's (test_contract.py)."""

from __future__ import annotations

import pytest
from store_helpers import MODELS, encoded, make_store, query, write

from serve_app.errors import ModelMismatchError
from serve_app.schemas import ScopeKey, SearchFilters
from serve_app.stores.opensearch import OpenSearchBackend
from serve_app.stores.opensearch.bodies import MAPPING_VERSION
from serve_app.stores.qdrant import QdrantBackend
from serve_app.stores.qdrant.connection import QdrantConnection
from serve_app.stores.values import IndexModels

# The stores hold async HTTP clients: fixtures and tests share the session's event loop.
pytestmark = pytest.mark.asyncio(loop_scope="session")


async def _fill(store) -> None:
    await store.write_documents(
        ScopeKey("t1"),
        [
            write(
                "d1",
                [
                    encoded("d1", 0, "alpha particles decay", [1, 0, 0, 0], {1: 1.0, 2: 0.5}),
                    encoded(
                        "d1", 1, "beta decay of neutrons", [0, 1, 0, 0], {2: 2.0}, section="Methods"
                    ),
                ],
            ),
            write(
                "d2",
                [
                    encoded(
                        "d2", 0, "gamma rays", [0.9, 0.1, 0, 0], {1: 0.2}, metadata={"year": 2020}
                    )
                ],
            ),
        ],
    )
    await store.write_documents(
        ScopeKey("t2"),
        [
            write(
                "d1", [encoded("d1", 0, "alpha other tenant", [1, 0, 0, 0], {1: 5.0}, tenant="t2")]
            )
        ],
    )


async def _texts(store, tenant, hits):
    return [c.text for c in await store.fetch(tenant, [h.chunk_id for h in hits])]


# -- BM25: vectors with IDF in Qdrant, analysed text in OpenSearch ---------------------------
async def test_bm25_in_qdrant_applies_per_tenant_idf(tmp_path):
    store = make_store("qdrant", tmp_path)
    await store.open(MODELS)
    await store.write_documents(
        ScopeKey("t1"), [write("d", [encoded("d", 0, "x", [1, 0, 0, 0], {7: 1.0, 8: 1.0})])]
    )
    await store.write_documents(
        ScopeKey("t1"), [write("e", [encoded("e", 0, "y", [0, 1, 0, 0], {8: 1.0})])]
    )
    before = (await store.search("bm25", query(terms={7: 1.0}), 5, ScopeKey("t1")))[0].score
    raw = (await store.search("splade", query(terms={7: 1.0}), 5, ScopeKey("t1")))[0].score
    assert before != pytest.approx(raw)  # IDF applied
    noise = [
        write(f"n{i}", [encoded(f"n{i}", 0, "z", [0, 0, 1, 0], {7: 1.0}, tenant="t2")])
        for i in range(20)
    ]
    await store.write_documents(ScopeKey("t2"), noise)
    after = (await store.search("bm25", query(terms={7: 1.0}), 5, ScopeKey("t1")))[0].score
    assert after == pytest.approx(before)
    await store.close()


async def test_bm25_in_opensearch_matches_analysed_text(tmp_path, opensearch_url):
    store = make_store("opensearch+qdrant", tmp_path, opensearch_url)
    await store.open(MODELS)
    await _fill(store)
    # "decays" and "neutron" stem to the indexed forms (english analyzer).
    hits = await store.search("bm25", query(text="neutron decays"), 10, ScopeKey("t1"))
    assert await _texts(store, ScopeKey("t1"), hits) == [
        "beta decay of neutrons",
        "alpha particles decay",
    ]
    title_hits = await store.search("bm25", query(text="title d2"), 10, ScopeKey("t1"))
    assert title_hits[0].doc_id == "d2"  # the boosted title field is searched too
    filtered = await store.search(
        "bm25", query(text="decay"), 10, ScopeKey("t1"), SearchFilters(sections=["Intro"])
    )
    assert await _texts(store, ScopeKey("t1"), filtered) == ["alpha particles decay"]
    assert await store.search("bm25", query(text="decay"), 10, ScopeKey("t3")) == []
    await store.close()


# -- model guard and migration behind the alias ------------------------------------------
OTHER = IndexModels(dense_model="other", dense_dim=4, splade_model="s", bm25_model="b")


@pytest.mark.parametrize("topology", ["qdrant", "opensearch+qdrant"])
async def test_model_guard_and_migration_switch_the_alias(topology, tmp_path, opensearch_url):
    from store_helpers import opensearch_config

    os_config = opensearch_config(opensearch_url)
    first = make_store(topology, tmp_path, opensearch_url, qdrant_local="q", os_config=os_config)
    await first.open(MODELS)
    await _fill(first)
    await first.close()

    refused = make_store(topology, tmp_path, opensearch_url, qdrant_local="q", os_config=os_config)
    with pytest.raises(ModelMismatchError, match=r"stores\.migrate"):
        await refused.open(OTHER)
    await refused.close()

    migrated = make_store(
        topology, tmp_path, opensearch_url, qdrant_local="q", os_config=os_config, migrate=True
    )
    await migrated.open(OTHER)
    assert await migrated.count(ScopeKey("t1")) == 0  # a fresh version behind the alias
    for backend in migrated.backends:
        assert backend.connection.physical.endswith("-v2")
    await migrated.write_documents(
        ScopeKey("t1"), [write("d9", [encoded("d9", 0, "new", [1, 0, 0, 0], {1: 1.0})])]
    )
    assert await migrated.count(ScopeKey("t1")) == 1
    await migrated.close()

    # Reopening with the new models finds v2 through the alias; the old models are refused.
    reopened = make_store(topology, tmp_path, opensearch_url, qdrant_local="q", os_config=os_config)
    await reopened.open(OTHER)
    assert await reopened.count(ScopeKey("t1")) == 1
    await reopened.close()


async def test_opensearch_alias_points_at_one_versioned_index(tmp_path, opensearch_url):
    from store_helpers import opensearch_config

    config = opensearch_config(opensearch_url)
    index = OpenSearchBackend(config)
    await index.open(MODELS)
    aliases = await index.connection.client.indices.get_alias(name=config.index)
    assert list(aliases) == [f"{config.index}-v1"]
    mapping = await index.connection.client.indices.get_mapping(index=config.index)
    meta = mapping[f"{config.index}-v1"]["mappings"]["_meta"]
    assert meta["models"] == MODELS.as_dict() and meta["mapping_version"] == MAPPING_VERSION
    await index.close()


async def test_qdrant_collection_records_models_and_dimension(tmp_path):
    from serve_app.config import QdrantConfig

    store = QdrantBackend(QdrantConnection(QdrantConfig(local_path=":memory:", collection="c"), tmp_path, ("dense",)))
    await store.open(MODELS)
    info = await store.connection.client.get_collection("c")
    assert info.config.params.vectors["dense"].size == 4
    assert info.config.metadata["models"]["dense_model"] == "m"
    await store.close()


async def test_qdrant_collection_carries_index_settings(tmp_path):
    from serve_app.config import QdrantConfig

    config = QdrantConfig(
        local_path=":memory:", collection="c", quantization="int8", on_disk=True, hnsw_m=32
    )
    store = QdrantBackend(QdrantConnection(config, tmp_path, ("dense", "splade", "bm25")))
    await store.open(MODELS)
    params = (await store.connection.client.get_collection("c")).config.params
    dense = params.vectors["dense"]
    assert dense.quantization_config.scalar.type.value == "int8" and dense.on_disk
    assert dense.hnsw_config.m == 32 and dense.distance.value == "Cosine"
    assert set(params.sparse_vectors) == {"splade", "bm25"}
    assert params.sparse_vectors["bm25"].modifier.value == "idf"
    await store.close()


@pytest.mark.parametrize("topology", ["qdrant", "opensearch+qdrant"])
async def test_each_store_records_the_revision_and_refuses_another(
    topology, tmp_path, opensearch_url
):
    """The dense revision is part of each store's binding (Qdrant's collection metadata,
    OpenSearch's mapping _meta); another one is refused, naming both."""
    from dataclasses import replace

    from store_helpers import opensearch_config

    built, configured = "a" * 40, "b" * 40
    os_config = opensearch_config(opensearch_url)
    first = make_store(topology, tmp_path, opensearch_url, qdrant_local="q", os_config=os_config)
    await first.open(replace(MODELS, dense_revision=built))
    for backend in first.backends:
        binding = await backend.connection.stored_binding(backend.connection.physical)
        assert binding.get("models", binding)["dense_revision"] == built, backend.name
    await first.close()

    refused = make_store(topology, tmp_path, opensearch_url, qdrant_local="q", os_config=os_config)
    with pytest.raises(ModelMismatchError) as error:
        await refused.open(replace(MODELS, dense_revision=configured))
    await refused.close()
    assert error.value.code == "STORE_MODEL_MISMATCH"
    assert f"dense_revision: recorded {built!r}, configured {configured!r}" in error.value.message


@pytest.mark.parametrize("topology", ["qdrant", "opensearch+qdrant"])
async def test_an_index_built_before_revisions_is_accepted_and_then_records_one(
    topology, tmp_path, opensearch_url, caplog
):
    """(was: refused, every deployment re-indexing after the upgrade) A version that records
    no dense revision (built before revisions were recorded) opens with a configuration that
    pins one, with a WARNING, and records the revision from then on."""
    from dataclasses import replace

    from store_helpers import opensearch_config

    pinned = "c" * 40
    os_config = opensearch_config(opensearch_url)
    old = make_store(topology, tmp_path, opensearch_url, qdrant_local="q", os_config=os_config)
    await old.open(MODELS)  # MODELS records no revision: an index of the previous release
    await old.close()

    upgraded = make_store(topology, tmp_path, opensearch_url, qdrant_local="q", os_config=os_config)
    await upgraded.open(replace(MODELS, dense_revision=pinned))
    for backend in upgraded.backends:
        binding = await backend.connection.stored_binding(backend.connection.physical)
        assert binding.get("models", binding)["dense_revision"] == pinned, backend.name
    await upgraded.close()
    assert "recorded no dense_revision" in caplog.text


async def test_attaching_before_any_opener_names_the_missing_alias(tmp_path, opensearch_url):
    """A replica that attaches to an index nobody opened gets NOT_FOUND naming the setting."""
    from store_helpers import opensearch_config

    from serve_app.config import QdrantConfig
    from serve_app.errors import NotFoundError

    config = opensearch_config(opensearch_url)
    config = config.model_copy(update={"index": "never-opened"})
    backends = [
        (OpenSearchBackend(config), "stores.opensearch.index"),
        (
            QdrantBackend(QdrantConnection(QdrantConfig(local_path=":memory:", collection="none"), tmp_path)),
            "stores.qdrant.collection",
        ),
    ]
    for backend, setting in backends:
        with pytest.raises(NotFoundError, match=f"behind the alias .* \\({setting}\\)"):
            await backend.attach()
        assert backend.connection.physical is None
        await backend.close()
