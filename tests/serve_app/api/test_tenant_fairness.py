"""One tenant's burst leaves the others theirs (OWASP API4), on a real server with the real
small models and LLM.

- Answers: tenant A opens more streamed answers than the LLM's slots and queue hold; past its
  own limit (``api.tenants.max_concurrent_answers``) A is refused 429 ``TENANT_LIMIT`` with
  ``Retry-After``, and tenant B's answer, sent while A's are in flight, is answered. On main
  A's burst took every slot and queue place, and B was refused OVERLOADED.
- A flood: A uploads and asks as fast as its answers come back (a client that honours
  ``Retry-After``, as the openai SDK does) while B searches; B's search P95 stays within 1.5x
  its P95 alone. The same flood with the rate limits off (as on main) is measured beside it
  and must push B's P95 past that bound, so the figure could have come out the other way.
- The request rate, the uploaded-text rate and the collection quota each refuse at their
  limit, naming it."""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import time
import uuid
from collections import Counter

import httpx
import pytest

from serve_app.api.app import create_app
from serve_app.api.auth import hash_api_key
from serve_app.generation import build_llm
from serve_app.generation.base import Completion, Usage
from serve_app.pipelines.components import build_components
from serve_app.schemas import Document, ScopeKey
from serve_app.service import RetrievalService
from serve_app.service.tenant_limits import TenantRate
from tests.serve_app.api.test_answer_api import ANSWER, DOCS
from tests.serve_app.api.test_answer_failures import Slowed
from tests.support.data import SMOLLM2
from tests.support.uvicorn_server import served

pytestmark = pytest.mark.asyncio(loop_scope="session")

A, B = {"X-API-Key": "key-a"}, {"X-API-Key": "key-b"}
PER_TENANT = 2
REQUESTS_PER_S, REQUEST_BURST = 100.0, 100
INGEST_BYTES_PER_MINUTE = 6_000
MAX_COLLECTIONS = 3
ALONE_S, FLOOD_S, ROUNDS = 1.5, 2.0, 3
ASK = {"question": "What improved recall of word pairs?", "stream": True, "max_tokens": 8}


@pytest.fixture(scope="module")
async def api(app_config_factory):
    keys = [
        {"name": "a", "sha256": hash_api_key("key-a"), "tenant_id": "tenant-a"},
        {"name": "b", "sha256": hash_api_key("key-b"), "tenant_id": "tenant-b"},
    ]
    config = app_config_factory(
        llm={**SMOLLM2, "parallel": 2, "max_queued": 2},  # 4 answers at once in all
        answer=ANSWER,
        api={
            "auth": {"api_keys": keys},
            "tenants": {
                "max_concurrent_answers": PER_TENANT,
                "requests_per_s": REQUESTS_PER_S,
                "request_burst": REQUEST_BURST,
                "ingest_bytes_per_minute": INGEST_BYTES_PER_MINUTE,
                "max_collections": MAX_COLLECTIONS,
            },
        },
    )
    llm = build_llm(config.llm)
    components = await build_components(config)
    service = RetrievalService(components, llm=Slowed(llm, first_s=2.0))
    documents = [Document(**d) for d in DOCS]
    for tenant in ("tenant-a", "tenant-b"):
        await service.ingest(ScopeKey(tenant), documents)
    # The flood's answers go to an LLM that, as deployed, runs on its own replica: on this
    # test's shared cores a local one would slow B's searches whatever the limits.
    flooded = RetrievalService(components, llm=Elsewhere(llm, first_s=1.0))
    app, flood_app = create_app(service), create_app(flooded)
    async with served(app) as url, served(flood_app) as flood_url:
        yield url, (flood_url, flood_app)
    await components.close()
    llm.close()


async def answer(http: httpx.AsyncClient, headers: dict) -> tuple[int, str, dict]:
    async with http.stream("POST", "/v1/answer", json=ASK, headers=headers) as response:
        body = (await response.aread()).decode()
        return response.status_code, body, dict(response.headers)


async def test_one_tenants_burst_leaves_another_its_answer(api):
    url, _ = api
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        burst = [asyncio.create_task(answer(http, A)) for _ in range(4)]
        await asyncio.sleep(0.5)  # A's answers are in flight, waiting for their first token
        status, body, _ = await answer(http, B)
        results = await asyncio.gather(*burst)
    assert status == 200 and "event: done" in body, body[-500:]
    refused = [(s, b, h) for s, b, h in results if s != 200]
    assert len(refused) == 4 - PER_TENANT, [r[:2] for r in results]
    for status, body, headers in refused:
        assert status == 429 and "TENANT_LIMIT" in body and "max_concurrent_answers" in body
        assert float(headers["retry-after"]) > 0
    assert all("event: done" in b for s, b, _ in results if s == 200)


def p95(seconds: list[float]) -> float:
    ordered = sorted(seconds)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


class Elsewhere(Slowed):
    """Test double: an LLM on another machine (its own replica, as deployed): admitted at
    once, a short canned answer after ``first_s``, none of this process's CPU."""

    async def complete(self, messages, params):
        await asyncio.sleep(self.first_s)
        return Completion("Sleep helps [1].", "stop", Usage(10, 4))

    async def open_stream(self, messages, params):
        return _Canned(self.first_s)


class _Canned:
    def __init__(self, first_s: float) -> None:
        self.first_s, self.usage, self.finish_reason = first_s, Usage(10, 4), None

    async def __aiter__(self):
        await asyncio.sleep(self.first_s)
        for delta in ("Sleep", " helps", " [1]."):
            yield delta
        self.finish_reason = "stop"

    async def aclose(self) -> None:
        return None


async def searches(http: httpx.AsyncClient, count: int = 10**6, for_s: float = 1e9) -> list[float]:
    """B's searches one after another, ``count`` of them or for ``for_s``: their latencies."""
    took: list[float] = []
    until = time.perf_counter() + for_s
    for i in range(count):
        if time.perf_counter() > until:
            break
        started = time.perf_counter()
        query = {"query": f"sleep and memory {i % 7}", "top_k": 4}
        response = await http.post("/v1/search", json=query, headers=B)
        assert response.status_code == 200, response.text
        took.append(time.perf_counter() - started)
    return took


async def flood(http: httpx.AsyncClient, stop: asyncio.Event, counts: Counter) -> None:
    """One of A's workers: upload a 5 KB document, ask, again; a 429 waits its Retry-After."""
    text = "Sleep spindles and slow waves replay the day's learning in the hippocampus. " * 65
    while not stop.is_set():
        # A new document each time: a repeated one is unchanged, and costs no encoding.
        upload = {
            "documents": [{"id": f"flood-{uuid.uuid4().hex}", "title": "Flood", "text": text}]
        }
        for method, path, body in (
            ("POST", "/v1/documents", upload),
            ("POST", "/v1/answer", {**ASK, "stream": False, "max_tokens": 4}),
        ):
            response = await http.request(method, path, json=body, headers=A)
            counts[response.status_code] += 1
            counts[path] += 1
            counts[(path, response.status_code)] += 1
            if response.status_code == 429:
                wait = float(response.headers["retry-after"])
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)


async def under_flood(url: str, for_s: float) -> tuple[list[float], Counter]:
    """B's searches for ``for_s`` under A's flood."""
    counts: Counter = Counter()
    stop = asyncio.Event()
    async with httpx.AsyncClient(base_url=url, timeout=120) as flooder:
        workers = [asyncio.create_task(flood(flooder, stop, counts)) for _ in range(4)]
        # From A's first upload written, or every worker's first upload answered, on: A's
        # allowance of a minute's text, which the limits let through at once, is spent (B
        # measures the flood, not that burst).
        while not counts[("/v1/documents", 200)] and counts["/v1/documents"] < len(workers):
            await asyncio.sleep(0.05)
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            took = await searches(http, for_s=for_s)
        stop.set()
        await asyncio.gather(*workers)
    return took, counts


async def alternating(url: str) -> tuple[list[float], Counter]:
    """B's search P95 under A's flood over its P95 alone just before, round by round (what
    else the machine does, another test worker here, weighs on both sides of a round alike):
    the ratios, and A's requests by status and route."""
    ratios: list[float] = []
    counts: Counter = Counter()
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        for _ in range(ROUNDS):
            alone = await searches(http, for_s=ALONE_S)
            flooded, seen = await under_flood(url, FLOOD_S)
            ratios.append(p95(flooded) / p95(alone))
            counts.update(seen)
    return ratios, counts


async def test_one_tenants_flood_leaves_another_its_search_pace(api):
    _, (url, app) = api
    rates = app.state.tenant_rates
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        await searches(http, 5)  # warm
    limited, limited_counts = await alternating(url)
    held = (rates.requests, rates.ingest_bytes)
    rates.requests = rates.ingest_bytes = None  # the same flood, with no rate limits (main)
    try:
        unlimited, unlimited_counts = await alternating(url)
    finally:
        rates.requests, rates.ingest_bytes = held
    figures = (
        f"B's search P95 under A's flood over B's alone, per round: with the limits "
        f"{[round(r, 2) for r in limited]} (A's requests {dict(limited_counts)}); without "
        f"{[round(r, 2) for r in unlimited]} (A's requests {dict(unlimited_counts)})"
    )
    print(figures)
    assert limited_counts[429] > 0, figures
    assert statistics.median(limited) <= 1.5, figures
    assert statistics.median(unlimited) > 1.5, figures


async def test_a_tenants_request_rate_and_uploaded_text_are_bounded(api):
    _, (url, app) = api
    rates = app.state.tenant_rates
    held = rates.requests
    rates.requests = TenantRate(1.0, 2, "requests per second", "api.tenants.requests_per_s")
    text = "Sleep spindles replay the day's learning. " * 100  # 4.3 KB of 6 KB a minute
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            seen = [(await http.get("/v1/collections", headers=A)) for _ in range(3)]
            other = await http.get("/v1/collections", headers=B)
            rates.requests = held
            first = await http.post(
                "/v1/documents", json={"documents": [{"id": "b-1", "text": text}]}, headers=B
            )
            second = await http.post(
                "/v1/documents", json={"documents": [{"id": "b-2", "text": text}]}, headers=B
            )
            unwritten = await http.get("/v1/documents/b-2", headers=B)
    finally:
        rates.requests = held
    assert [r.status_code for r in seen] == [200, 200, 429], [r.text for r in seen]
    refused = seen[-1]
    assert refused.json()["error"]["code"] == "TENANT_LIMIT"
    assert "api.tenants.requests_per_s" in refused.json()["error"]["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 2
    assert other.status_code == 200  # tenant B's own bucket
    assert first.status_code == 200, first.text
    assert second.status_code == 429, second.text
    assert "api.tenants.ingest_bytes_per_minute" in second.json()["error"]["message"]
    assert int(second.headers["retry-after"]) >= 20  # 2.6 KB short at 100 bytes a second
    assert unwritten.status_code == 404  # refused before anything was chunked or written


async def test_a_tenants_collections_stop_at_its_quota(api):
    url, _ = api
    names = [f"quota-{i}" for i in range(MAX_COLLECTIONS + 1)]
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        made = [
            (await http.post("/v1/collections", json={"name": n}, headers=A)).status_code
            for n in names
        ]
        again = await http.post("/v1/collections", json={"name": names[0]}, headers=A)
        others = await http.post("/v1/collections", json={"name": names[-1]}, headers=B)
        await http.delete(f"/v1/collections/{names[0]}", headers=A)
        freed = await http.post("/v1/collections", json={"name": names[-1]}, headers=A)
        last = (await http.post("/v1/collections", json={"name": "quota-x"}, headers=A)).json()
        for name in names[1:]:
            await http.delete(f"/v1/collections/{name}", headers=A)
        await http.delete(f"/v1/collections/{names[-1]}", headers=B)
    assert made == [201] * MAX_COLLECTIONS + [403], made
    assert last["error"]["code"] == "TENANT_QUOTA"
    assert "api.tenants.max_collections" in last["error"]["message"]
    assert again.status_code == 409  # an existing name is still a conflict, not the quota
    assert others.status_code == 201  # tenant B's own quota
    assert freed.status_code == 201
