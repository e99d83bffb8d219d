"""One tenant's burst of answers leaves the others theirs (OWASP API4), on a real server with
the real small LLM: tenant A opens more streamed answers than the LLM's slots and queue hold;
past its own limit (``api.tenants.max_concurrent_answers``) A is refused 429 ``TENANT_LIMIT``
with ``Retry-After``, and tenant B's answer, sent while A's are in flight, is answered. On
main A's burst took every slot and queue place, and B was refused OVERLOADED."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from serve_app.api.app import create_app
from serve_app.api.auth import hash_api_key
from serve_app.generation import build_llm
from serve_app.pipelines.components import build_components
from serve_app.schemas import Document
from serve_app.service import RetrievalService
from serve_app.stores.base import ScopeKey
from tests.serve_app.api.test_answer_api import ANSWER, DOCS
from tests.serve_app.api.test_answer_failures import Slowed
from tests.support.data import SMOLLM2
from tests.support.uvicorn_server import served

pytestmark = pytest.mark.asyncio(loop_scope="session")

A, B = {"X-API-Key": "key-a"}, {"X-API-Key": "key-b"}
PER_TENANT = 2
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
        api={"auth": {"api_keys": keys}, "tenants": {"max_concurrent_answers": PER_TENANT}},
    )
    llm = build_llm(config.llm)
    components = await build_components(config)
    service = RetrievalService(components, llm=Slowed(llm, first_s=2.0))
    documents = [Document(**d) for d in DOCS]
    for tenant in ("tenant-a", "tenant-b"):
        await service.ingest(ScopeKey(tenant), documents)
    async with served(create_app(service)) as url:
        yield url
    await components.close()
    llm.close()


async def answer(http: httpx.AsyncClient, headers: dict) -> tuple[int, str, dict]:
    async with http.stream("POST", "/v1/answer", json=ASK, headers=headers) as response:
        body = (await response.aread()).decode()
        return response.status_code, body, dict(response.headers)


async def test_one_tenants_burst_leaves_another_its_answer(api):
    async with httpx.AsyncClient(base_url=api, timeout=120) as http:
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
