"""One operation, one handler: every route of the default collection (``/v1/documents...``,
``/v1/search``) has its twin under ``/v1/collections/{name}`` with the same parameters, the
same request body and the same answers, read from the OpenAPI schema the API publishes."""

from __future__ import annotations

import pytest

from serve_app.api.app import create_app
from serve_app.pipelines.components import Components
from serve_app.service import RetrievalService

NAMED = "/v1/collections/{name}"


@pytest.fixture(scope="module")
def openapi(local_config) -> dict:
    # The schema needs no model or store: a service over nothing is enough to build the app.
    components = Components.__new__(Components)
    components.config = local_config
    service = RetrievalService.__new__(RetrievalService)
    service.config = local_config
    return create_app(service).openapi()


def shape(operation: dict) -> dict:
    parameters = sorted(
        (p["name"], p["in"], p.get("required", False), str(p.get("schema")))
        for p in operation.get("parameters", [])
        if p["name"] != "name"
    )
    return {
        "parameters": parameters,
        "body": operation.get("requestBody"),
        "responses": {code: r.get("content") for code, r in operation["responses"].items()},
    }


def pairs(paths: dict) -> list[tuple[str, str, str]]:
    found = []
    for path, operations in paths.items():
        if path.startswith("/v1/") and not path.startswith(("/v1/collections", "/v1/admin")):
            for method in operations:
                found.append((method, path, NAMED + path.removeprefix("/v1")))
    return found


def test_every_default_route_has_a_named_twin_with_the_same_parameters(openapi):
    paths = openapi["paths"]
    found = pairs(paths)
    assert {(m, p) for m, p, _ in found} >= {
        ("post", "/v1/documents"),
        ("get", "/v1/documents/{doc_id}"),
        ("delete", "/v1/documents/{doc_id}"),
        ("post", "/v1/search"),
        ("get", "/v1/search"),
    }
    for method, default, named in found:
        assert named in paths and method in paths[named], f"{method} {named} is missing"
        assert shape(paths[default][method]) == shape(paths[named][method]), (method, default)
        names = [p["name"] for p in paths[named][method].get("parameters", [])]
        assert "name" in names, (method, named)


def test_the_search_query_string_offers_rerank_on_both_routes(openapi):
    for path in ("/v1/search", NAMED + "/search"):
        names = {p["name"] for p in openapi["paths"][path]["get"]["parameters"]}
        assert {"q", "top_k", "strategies", "fusion", "rerank"} <= names, path
