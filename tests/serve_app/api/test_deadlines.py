"""Every route that does work answers within its deadline: a service whose every call hangs
still gets a 504 TIMEOUT (or, for readiness, a bounded "timeout" check) in about the time the
client asked for. The route table is read from the app's OpenAPI document, so a new route without a case here
fails the test."""

from __future__ import annotations

import asyncio
import inspect
import time

import httpx
import pytest

from serve_app.api.app import create_app
from serve_app.pipelines.components import build_components
from serve_app.service import RetrievalService

HANG_S = 30.0
CHAT = {"model": "m", "messages": [{"role": "user", "content": "q"}]}
DOC = {"documents": [{"id": "d1", "text": "a short document"}]}

# (method, route path) -> the request sent to it
CASES: dict[tuple[str, str], dict] = {
    ("POST", "/v1/documents"): {"url": "/v1/documents", "json": DOC},
    ("GET", "/v1/documents"): {"url": "/v1/documents"},
    ("GET", "/v1/documents/{doc_id}"): {"url": "/v1/documents/d1"},
    ("DELETE", "/v1/documents/{doc_id}"): {"url": "/v1/documents/d1"},
    ("POST", "/v1/search"): {"url": "/v1/search", "json": {"query": "q"}},
    ("GET", "/v1/search"): {"url": "/v1/search", "params": {"q": "q"}},
    ("GET", "/v1/admin/inspect"): {"url": "/v1/admin/inspect"},
    ("POST", "/v1/collections"): {"url": "/v1/collections", "json": {"name": "c1"}},
    ("GET", "/v1/collections"): {"url": "/v1/collections"},
    ("GET", "/v1/collections/{name}"): {"url": "/v1/collections/c1"},
    ("DELETE", "/v1/collections/{name}"): {"url": "/v1/collections/c1"},
    ("POST", "/v1/collections/{name}/documents"): {"url": "/v1/collections/c1/documents", "json": DOC},
    ("GET", "/v1/collections/{name}/documents"): {"url": "/v1/collections/c1/documents"},
    ("GET", "/v1/collections/{name}/documents/{doc_id}"): {"url": "/v1/collections/c1/documents/d1"},
    ("DELETE", "/v1/collections/{name}/documents/{doc_id}"): {"url": "/v1/collections/c1/documents/d1"},
    ("POST", "/v1/collections/{name}/search"): {"url": "/v1/collections/c1/search", "json": {"query": "q"}},
    ("GET", "/v1/collections/{name}/search"): {"url": "/v1/collections/c1/search", "params": {"q": "q"}},
    ("POST", "/v1/answer"): {"url": "/v1/answer", "json": {"question": "q"}},
    ("POST", "/v1/collections/{name}/answer"): {"url": "/v1/collections/c1/answer", "json": {"question": "q", "stream": False}},
    ("POST", "/v1/chat/completions"): {"url": "/v1/chat/completions", "json": CHAT},
    ("POST", "/v1/collections/{name}/chat/completions"): {"url": "/v1/collections/c1/chat/completions", "json": {**CHAT, "model": "c1", "stream": True}},
    ("GET", "/v1/models"): {"url": "/v1/models"},
    ("GET", "/v1/models/{model}"): {"url": "/v1/models/m"},
    ("GET", "/v1/collections/{name}/models"): {"url": "/v1/collections/c1/models"},
    ("GET", "/v1/collections/{name}/models/{model}"): {"url": "/v1/collections/c1/models/c1"},
}  # fmt: skip
# No I/O: nothing to wait for.
UNTIMED = {("GET", "/healthz"), ("GET", "/metrics")}


class Hanging:
    """The service, with every coroutine method hanging before it does anything."""

    def __init__(self, inner: RetrievalService) -> None:
        self._inner = inner

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        attribute = getattr(self._inner, name)
        if name == "readiness" or not inspect.iscoroutinefunction(attribute):  # checks hang
            return attribute

        async def hang(*args, **kwargs):  # type: ignore[no-untyped-def]
            await asyncio.sleep(HANG_S)
            return await attribute(*args, **kwargs)

        return hang


@pytest.fixture(scope="module")
async def app(app_config_factory):
    config = app_config_factory(api={"auth": {"mode": "none"}})
    components = await build_components(config)
    service = RetrievalService(components)
    for name in list(service.checks):  # readiness checks hang too
        service.checks[name] = lambda: asyncio.sleep(HANG_S)
    application = create_app(service)
    application.state.service = Hanging(service)
    yield application
    await application.state.loaders.close()
    await components.close()


def routes(app) -> set[tuple[str, str]]:
    """(method, path) of every operation the app serves, from its OpenAPI document."""
    return {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    }


async def test_every_route_has_a_case(app):
    assert routes(app) - UNTIMED - {("GET", "/readyz")} == set(CASES)


@pytest.mark.parametrize("route", sorted(CASES), ids=[" ".join(r) for r in sorted(CASES)])
async def test_route_answers_504_within_the_requested_deadline(app, route):
    case = dict(CASES[route])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=20) as http:
        started = time.perf_counter()
        response = await http.request(route[0], headers={"X-Request-Timeout-Ms": "200"}, **case)
        seconds = time.perf_counter() - started
    assert response.status_code == 504, response.text
    assert response.json()["error"]["code"] == "TIMEOUT"
    assert seconds < 5


async def test_readiness_is_bounded(app):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=20) as http:
        started = time.perf_counter()
        response = await http.get("/readyz")
    assert time.perf_counter() - started < 5
    assert response.status_code == 503
    assert set(response.json()["checks"].values()) == {"timeout"}


async def test_concurrent_readiness_probes_share_one_round_of_checks(app):
    """(was: every /readyz ran every check, an internal call each, so a flood of the
    unauthenticated probe fanned out to the store and the LLM) Probes that come while the
    checks run share that run; the next probe after it runs them again."""
    service = app.state.service._inner
    held = dict(service.checks)
    runs = []

    async def counted() -> None:
        runs.append(1)
        await asyncio.sleep(0.3)

    service.checks = {"store": counted}
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            answers = await asyncio.gather(*(http.get("/readyz") for _ in range(50)))
            assert len(runs) == 1
            assert (await http.get("/readyz")).status_code == 200
    finally:
        service.checks = held
    assert {a.status_code for a in answers} == {200}
    assert len(runs) == 2
