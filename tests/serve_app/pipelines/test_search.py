import dataclasses

import pytest
from pydantic import ValidationError

from serve_app.errors import InvalidInputError
from serve_app.pipelines.components import build_components
from serve_app.pipelines.ingest import IngestPipeline
from serve_app.pipelines.search import SearchPipeline
from serve_app.schemas import Document, ScopeKey, SearchFilters, SearchRequest
from serve_app.stores.base import ServingIndex

DEFAULT = ScopeKey("default")


@pytest.fixture(scope="module")
async def indexed(components, corpus):
    await IngestPipeline(components).ingest(DEFAULT, corpus)
    return SearchPipeline(components)


async def test_finds_the_document_a_query_is_about(indexed, corpus):
    target = corpus[3]
    response = await indexed.search(SearchRequest(query=target.title, top_k=5), DEFAULT)
    assert response.results[0].chunk.doc_id == target.id
    top = response.results[0]
    assert set(top.scores) == {"bm25", "splade", "dense"} and set(top.ranks) == set(top.scores)
    assert top.rerank_score is None and top.score == top.fused_score
    for hit in response.results:  # each list's share of the fused score, as the page draws it
        assert set(hit.contributions) == set(hit.scores)
        assert sum(hit.contributions.values()) == pytest.approx(hit.fused_score)
    assert response.strategies == ["bm25", "splade", "dense"]
    assert response.fusion == indexed.config.search.fusion.method == "dbsf"


async def test_timings_cover_every_stage(indexed):
    response = await indexed.search(SearchRequest(query="vitamin D deficiency"), DEFAULT)
    for stage in (
        "encode.dense",
        "encode.splade",
        "encode.bm25",
        "retrieve",
        "fetch",
        "fusion",
        "total",
    ):
        assert stage in response.timings_ms


@pytest.mark.parametrize("strategy", ["bm25", "splade", "dense"])
async def test_single_strategy(indexed, strategy):
    response = await indexed.search(
        SearchRequest(query="cancer", strategies=[strategy], top_k=3), DEFAULT
    )
    assert len(response.results) == 3
    assert all(set(r.scores) == {strategy} for r in response.results)


@pytest.mark.parametrize("method", ["rrf", "weighted", "dbsf"])
async def test_each_fusion_method(indexed, method):
    response = await indexed.search(
        SearchRequest.model_validate({"query": "stem cells", "fusion": {"method": method}}),
        DEFAULT,
    )
    assert response.fusion == method
    scores = [r.score for r in response.results]
    assert scores == sorted(scores, reverse=True)


async def test_filters_apply_inside_retrieval(indexed, corpus):
    wanted = [corpus[0].id, corpus[1].id]
    response = await indexed.search(
        SearchRequest(query="cells", top_k=10, filters=SearchFilters(doc_ids=wanted)), DEFAULT
    )
    assert response.results and {r.chunk.doc_id for r in response.results} <= set(wanted)


async def test_other_tenant_sees_nothing(indexed):
    response = await indexed.search(SearchRequest(query="cells"), ScopeKey("nobody"))
    assert response.results == [] and response.total == 0


async def test_bad_requests(indexed):
    with pytest.raises(ValidationError, match="empty"):
        SearchRequest(query="")
    with pytest.raises(ValidationError):
        SearchRequest.model_validate({"query": "x", "strategies": ["colbert"]})
    with pytest.raises(InvalidInputError, match="rerank"):
        await indexed.search(SearchRequest(query="x", rerank=True), DEFAULT)


async def test_disabled_strategy_is_refused(app_config_factory):
    config = app_config_factory(splade={"enabled": False}, search={"strategies": ["bm25", "dense"]})
    components = await build_components(config)
    try:
        with pytest.raises(InvalidInputError, match="'splade' is not enabled"):
            await SearchPipeline(components).search(
                SearchRequest(query="x", strategies=["splade"]), DEFAULT
            )
    finally:
        await components.close()


async def test_rerank_reorders_and_keeps_both_scores(app_config_factory, tiny_reranker_dir, corpus):
    config = app_config_factory(
        reranker={"enabled": True, "model": str(tiny_reranker_dir), "depth": 8}
    )
    components = await build_components(config)
    try:
        await IngestPipeline(components).ingest(DEFAULT, corpus[:12])
        response = await SearchPipeline(components).search(
            SearchRequest(query="protein", top_k=5, rerank=True), DEFAULT
        )
        assert response.reranked and "rerank" in response.timings_ms
        reranked = [r.rerank_score for r in response.results]
        assert reranked == sorted(reranked, reverse=True)
        assert all(r.score == r.rerank_score and r.fused_score > 0 for r in response.results)
    finally:
        await components.close()


class ServingOnly:
    """The index seen through ``ServingIndex`` alone: any other member is missing."""

    MEMBERS = {name for name in vars(ServingIndex) if not name.startswith("_")} | {"strategies"}

    def __init__(self, index) -> None:
        self._index = index

    def __getattr__(self, name: str):
        if name not in self.MEMBERS:
            raise AttributeError(f"{name} is not part of the serving protocol")
        return getattr(self._index, name)


async def test_the_serving_path_needs_the_serving_protocol_only(indexed, components):
    narrow = dataclasses.replace(components, index=ServingOnly(components.index), retriever=None)
    tenant = ScopeKey("serving-only")
    written = await IngestPipeline(narrow).ingest(tenant, [Document(id="n1", text="Cells divide.")])
    assert written.written == ["n1"]
    pipeline = SearchPipeline(narrow)
    request = SearchRequest(query="vitamin D deficiency", top_k=5)
    got = await pipeline.search(request, DEFAULT)
    want = await indexed.search(request, DEFAULT)
    assert [r.chunk.id for r in got.results] == [r.chunk.id for r in want.results]
    (vectors,) = await pipeline.encode_queries(["cells"], ["dense"])
    assert (await pipeline.retrieve(vectors, ["dense"], 5, tenant))["dense"]
