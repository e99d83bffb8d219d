"""Contract: every request the OpenSearch adapter sends validates against the official
OpenSearch API specification, recorded at the HTTP connection while the adapter runs its whole
workflow against osmem-server. The spec is the check a lenient test server cannot give."""

from __future__ import annotations

from typing import ClassVar
from urllib.parse import urlsplit

import jsonschema
import pytest
from opensearch_spec import decode, validate
from opensearchpy import AIOHttpConnection, AsyncOpenSearch
from store_helpers import MODELS, encoded, opensearch_config, query, write

from serve_app.errors import ServeAppError
from serve_app.schemas import ScopeKey, SearchFilters
from serve_app.stores.index import StoreIndex
from serve_app.stores.opensearch import OpenSearchBackend, bodies
from serve_app.stores.values import IndexModels


class RecordingConnection(AIOHttpConnection):
    sent: ClassVar[list[tuple[str, str, object]]] = []

    async def perform_request(self, method, url, params=None, body=None, *args, **kwargs):
        headers = kwargs.get("headers") or {}
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), None)
        self.sent.append((method, urlsplit(url).path, decode(body, content_type)))
        return await super().perform_request(method, url, params, body, *args, **kwargs)


def recording_index(config) -> StoreIndex:
    client = AsyncOpenSearch(hosts=config.hosts, connection_class=RecordingConnection)
    return StoreIndex([OpenSearchBackend(config, migrate=True, client=client)])


async def _workflow(opensearch_url) -> None:
    config = opensearch_config(opensearch_url, snapshot_repository="backups", bulk_batch_size=2)
    index = recording_index(config)
    await index.open(MODELS)
    chunks = [
        encoded("d1", 0, "alpha decay", [1, 0, 0, 0], {1: 1.0, 2: 0.5}),
        encoded("d1", 1, "beta decay", [0, 1, 0, 0], {2: 2.0}, section="Methods"),
        encoded("d1", 2, "gamma", [0, 0, 1, 0], {3: 1.0}, metadata={"year": 2020, "tag": "x"}),
    ]
    await index.write_documents(ScopeKey("t1"), [write("d1", chunks)])
    await index.write_documents(ScopeKey("t1"), [write("d1", chunks[:2], "h2")])  # stale sweep
    filters = SearchFilters(doc_ids=["d1"], sections=["Methods"], metadata={"tag": ["x", "y"]})
    await index.search_many(
        ["bm25", "splade"], query(text="decay", terms={1: 1, 2: 2}), 5, ScopeKey("t1")
    )
    await index.search_many(["bm25", "splade"], query(text="decay"), 5, ScopeKey("t1"), filters)
    await index.document_hashes(ScopeKey("t1"), ["d1", "d2"])
    await index.document_info(ScopeKey("t1"), "d1")
    await index.fetch(ScopeKey("t1"), [c.chunk.id for c in chunks])
    await index.fetch_batch(
        [(ScopeKey("t1"), [chunks[0].chunk.id]), (ScopeKey("t2"), [chunks[1].chunk.id])]
    )
    await index.count(ScopeKey("t1"))
    await index.count()
    (backend,) = index.backends
    await backend.scroll_payloads(
        ScopeKey("t1"), ["tenant_id"], None, 2
    )  # StoreIndex.count's pages
    await index.create_collection(ScopeKey("t1", "papers"))
    await index.write_documents(ScopeKey("t1", "papers"), [write("d1", chunks[:1])])
    await index.inspect(ScopeKey("t1", None))
    await index.delete_collection(ScopeKey("t1", "papers"))
    await index.delete_document(ScopeKey("t1"), "d1")
    with pytest.raises(ServeAppError):  # osmem has no _snapshot API; the body is still checked
        await index.snapshot_stores()[0].create_snapshot("nightly")
    await index.close()

    # neural_sparse (OpenSearch >= 2.11 with the neural-search plugin; osmem lacks it).
    neural = recording_index(config.model_copy(update={"splade_query": "neural_sparse"}))
    await neural.open(MODELS)
    with pytest.raises(ServeAppError, match="neural_sparse"):
        await neural.search_many(["splade"], query(terms={1: 1.0}), 5, ScopeKey("t1"))
    await neural.close()

    # A model change with migrate: a new version and one atomic alias switch.
    other = IndexModels(dense_model="x", dense_dim=4, splade_model="s", bm25_model="b")
    migrated = recording_index(config)
    await migrated.open(other)
    await migrated.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_every_request_body_validates_against_the_spec(opensearch_url):
    RecordingConnection.sent = []
    await _workflow(opensearch_url)
    seen = set()
    for method, path, body in RecordingConnection.sent:
        op = validate(method, path, body)
        seen.add((op.method, op.template))
    expected = {
        ("put", "/{index}"),
        ("post", "/_aliases"),
        ("post", "/_bulk"),
        ("post", "/_msearch"),
        ("post", "/{index}/_search"),
        ("post", "/{index}/_delete_by_query"),
        ("post", "/{index}/_mget"),
        ("post", "/{index}/_count"),
        ("put", "/_snapshot/{repository}/{snapshot}"),
        # the collection registry: one document per collection
        ("head", "/{index}"),
        ("put", "/{index}/_create/{id}"),
        ("post", "/{index}/_update/{id}"),
        ("get", "/{index}/_doc/{id}"),
        ("delete", "/{index}/_doc/{id}"),
    }
    assert expected <= seen, f"not exercised: {expected - seen}"
    switch = [b for m, p, b in RecordingConnection.sent if p == "/_aliases"][-1]
    assert [next(iter(a)) for a in switch["actions"]] == ["remove", "add"]


def test_the_validator_rejects_what_opensearch_would_reject():
    with pytest.raises(jsonschema.ValidationError):
        validate("POST", "/i/_search", {"size": "10"})
    with pytest.raises(jsonschema.ValidationError):
        validate("POST", "/i/_search", {"query": {"rank_feature": {"boost": 1.0}}})
    with pytest.raises(jsonschema.ValidationError):
        validate("POST", "/_aliases", {"actions": "add"})
    with pytest.raises(AssertionError, match="not an operation"):
        validate("POST", "/i/_nonsense/x/y", {})


@pytest.mark.parametrize("mode", ["rank_feature", "neural_sparse"])
def test_query_bodies_validate(mode):
    config = opensearch_config("http://unused", splade_query=mode, splade_query_top_terms=2)
    clauses = bodies.filter_clauses(
        ScopeKey("t"), SearchFilters(metadata={"year": 2020, "ok": True})
    )
    vector = query(terms={5: 0.1, 6: 3.0, 7: 2.0}).splade
    splade = bodies.splade_query(config, vector, 10, clauses)
    validate("POST", "/i/_search", splade)
    validate("POST", "/i/_search", bodies.bm25_query(config, "q", 10, clauses))
    validate("PUT", "/i-v1", bodies.index_body(config, MODELS))
    validate("POST", "/i/_search", bodies.hashes_query(ScopeKey("t"), ["a"]))
    validate("POST", "/i/_search", bodies.document_query(ScopeKey("t"), "a", 10))
    validate("POST", "/i/_delete_by_query", bodies.ids_query(ScopeKey("t"), ["x", "y"]))
    validate("POST", "/i/_delete_by_query", bodies.documents_query(ScopeKey("t"), ["a", "b"]))
    # Pruned to the query's top terms, strongest first.
    if mode == "rank_feature":
        fields = [c["rank_feature"]["field"] for c in splade["query"]["bool"]["should"]]
        assert fields == ["splade.6", "splade.7"]
    else:
        tokens = splade["query"]["bool"]["must"][0]["neural_sparse"]["splade"]["query_tokens"]
        assert tokens == {"6": 3.0, "7": 2.0}
