"""Congruence: one small real corpus (SciFact abstracts, real MiniLM / SPLADE / BM25 vectors)
written once into each topology, the same queries through each, the same answers.

* dense: identical top-10 ids and scores (1e-5) everywhere: exact search on the same vectors.
* SPLADE: embedded vs Qdrant identical; OpenSearch (``rank_feature`` clauses, no pruning here)
  computes the same dot product, but Lucene keeps ``rank_features`` at about 9 significant
  bits, so scores may differ by < 1 % and near-ties may swap: top-10 sets must agree on >= 9 of
  10 for every query, and scores within 1 %.
* BM25: embedded vs Qdrant identical (same sparse vectors, IDF from the same counts).
  OpenSearch runs its own BM25 on the same text (the ``body`` field: title, headings, chunk
  text, as the encoders see it) analysed by its english analyzer, whose tokenizer, stemmer and
  stopwords differ from the engine's BM25 tokenizer, so only the result sets are compared:
  mean top-10 overlap >= 0.6 and the first hit among the other's top-10 for >= 80 % of queries.
"""

from __future__ import annotations

import dataclasses

import pytest
from store_helpers import make_store, opensearch_config

from serve_app.evaluation.beir import load_beir
from serve_app.pipelines.components import build_components
from serve_app.pipelines.ingest import IngestPipeline
from serve_app.pipelines.search import SearchPipeline
from serve_app.schemas import ScopeKey

pytestmark = pytest.mark.slow
TENANT = ScopeKey("t")
N_QUERIES = 25


@pytest.fixture(scope="module")
async def topologies(app_config_factory, scifact_dir, opensearch_url, tmp_path_factory):
    config = app_config_factory()
    dataset = load_beir(scifact_dir, "test")
    query_ids = sorted(dataset.queries)[:N_QUERIES]
    relevant = {d for q in query_ids for d in dataset.qrels.get(q, {})}
    corpus = [d for d in dataset.corpus if d.id in relevant] + [
        d for d in dataset.corpus[:60] if d.id not in relevant
    ]
    components = await build_components(config)
    writes = await IngestPipeline(components).build_writes(
        TENANT, [(d, f"h-{d.id}") for d in corpus]
    )
    tmp = tmp_path_factory.mktemp("congruence")
    os_config = opensearch_config(opensearch_url, splade_query_top_terms=10_000)
    stores = {
        "embedded": components.index,
        "qdrant": make_store("qdrant", tmp),
        "opensearch+qdrant": make_store(
            "opensearch+qdrant", tmp, opensearch_url, os_config=os_config
        ),
    }
    for name, store in stores.items():
        if name != "embedded":
            await store.open(components.models())
        await store.write_documents(TENANT, writes)
    search = SearchPipeline(components)
    texts = [dataset.queries[q] for q in query_ids]
    vectors = await search.encode_queries(texts, ["bm25", "splade", "dense"])
    runs = {}
    for name, store in stores.items():
        view = SearchPipeline(dataclasses.replace(components, index=store))
        runs[name] = [
            await view.retrieve(v, ["bm25", "splade", "dense"], 10, TENANT) for v in vectors
        ]
    yield runs, {name: await s.count(TENANT) for name, s in stores.items()}
    for name, store in stores.items():
        if name != "embedded":
            await store.close()
    await components.close()


def ids(hits):
    return [h.chunk_id for h in hits]


def test_every_topology_holds_the_same_chunks(topologies):
    _, counts = topologies
    assert len(set(counts.values())) == 1 and counts["embedded"] > 80  # about 90 documents


@pytest.mark.parametrize("other", ["qdrant", "opensearch+qdrant"])
def test_dense_top10_identical(topologies, other):
    runs, _ = topologies
    for mine, theirs in zip(runs["embedded"], runs[other], strict=True):
        assert ids(mine["dense"]) == ids(theirs["dense"])
        assert [h.score for h in mine["dense"]] == pytest.approx(
            [h.score for h in theirs["dense"]], abs=1e-5
        )


@pytest.mark.parametrize("strategy", ["splade", "bm25"])
def test_qdrant_sparse_identical_to_embedded(topologies, strategy):
    runs, _ = topologies
    for mine, theirs in zip(runs["embedded"], runs["qdrant"], strict=True):
        assert ids(mine[strategy]) == ids(theirs[strategy])
        assert [h.score for h in mine[strategy]] == pytest.approx(
            [h.score for h in theirs[strategy]], rel=1e-4
        )


def test_opensearch_splade_same_dot_product(topologies):
    runs, _ = topologies
    same = 0
    for mine, theirs in zip(runs["embedded"], runs["opensearch+qdrant"], strict=True):
        assert len(set(ids(mine["splade"])) & set(ids(theirs["splade"]))) >= 9
        same += ids(mine["splade"]) == ids(theirs["splade"])
        theirs_by_id = {h.chunk_id: h.score for h in theirs["splade"]}
        for hit in mine["splade"]:
            if hit.chunk_id in theirs_by_id:
                assert theirs_by_id[hit.chunk_id] == pytest.approx(hit.score, rel=0.01)
    print(f"splade: identical top-10 order for {same} of {len(runs['embedded'])} queries")


def test_opensearch_bm25_agrees_on_result_sets(topologies):
    runs, _ = topologies
    overlaps, first_found = [], 0
    for mine, theirs in zip(runs["embedded"], runs["opensearch+qdrant"], strict=True):
        a, b = ids(mine["bm25"]), ids(theirs["bm25"])
        overlaps.append(len(set(a) & set(b)) / max(len(a), 1))
        first_found += bool(a) and a[0] in b
    print(f"bm25 top-10 overlap mean {sum(overlaps) / len(overlaps):.2f}, first hit {first_found}")
    assert sum(overlaps) / len(overlaps) >= 0.6
    assert first_found >= 0.8 * len(overlaps)
