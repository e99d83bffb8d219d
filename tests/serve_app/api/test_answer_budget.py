"""The answer prompt's token budget over HTTP (SmolLM2 on llama.cpp, the real encoders): a
request whose prompt and ``max_tokens`` cannot fit the context window is a 422 naming the
numbers before any byte is streamed; a question over its token limit likewise; passages are
packed by the model's tokens and the results show exactly what the prompt held."""

from __future__ import annotations

import httpx
import pytest

from serve_app.api.app import create_app
from serve_app.generation import build_llm
from serve_app.pipelines.components import build_components
from serve_app.schemas import Document, ScopeKey
from serve_app.service import RetrievalService
from tests.support.data import SMOLLM2

pytestmark = pytest.mark.asyncio(loop_scope="session")

SENTENCE = "Slow-wave sleep after training improved the recall of word pairs in adults. "
DOCS = [Document(id=f"sleep-{i}", title=f"Sleep study {i}", text=SENTENCE * 40) for i in range(3)]
LLM = {**SMOLLM2, "context_tokens": 1024, "parallel": 1}
ANSWER = {
    "top_k": 2,
    "max_passage_tokens": 96,
    "max_question_tokens": 64,
    "history_tokens": 64,
    "max_tokens": 32,
    "max_tokens_limit": 4096,
    "understanding": {"enabled": False},
}


@pytest.fixture(scope="module")
async def service(app_config_factory):
    config = app_config_factory(llm=LLM, answer=ANSWER)
    llm = build_llm(config.llm)
    service = RetrievalService(await build_components(config), llm=llm)
    await service.ingest(ScopeKey("default"), DOCS)
    yield service
    await service.components.close()
    llm.close()


@pytest.fixture(scope="module")
async def client(service):
    transport = httpx.ASGITransport(app=create_app(service))
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=120) as http:
        yield http


async def test_an_over_budget_request_is_a_422_naming_the_numbers(client):
    """Before: a prompt and max_tokens past the context window started the answer (200,
    metadata) and ended it with an error event, or let the engine cut it."""
    body = {"question": "Does sleep improve recall?", "max_tokens": 1000, "stream": True}
    response = await client.post("/v1/answer", json=body)
    assert response.status_code == 422, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == "PROMPT_TOO_LONG"
    assert "max_tokens (1000)" in error["message"] and "holds 1024" in error["message"]
    long_question = {"question": "Does sleep improve recall? " * 30, "max_tokens": 8}
    response = await client.post("/v1/answer", json=long_question)
    assert response.status_code == 422
    assert "answer.max_question_tokens" in response.json()["error"]["message"]


async def test_a_top_k_over_the_budget_s_limit_is_a_422_before_generation(client):
    """1,024 tokens less 320 of fixed text, 64 of history, 64 of question and 32 of answer
    hold 4 passages of 96 + 24 tokens. Before: top_k 5 was answered (200) although a
    question and history at their allowance could not fit beside five passages."""
    body = {"question": "Does sleep improve recall?", "top_k": 5, "stream": True}
    response = await client.post("/v1/answer", json=body)
    assert response.status_code == 422, response.text[:300]
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT" and error["details"] == {"field": "top_k", "limit": 4}
    assert "top_k 5 is above 4" in error["message"]


async def test_packed_passages_show_what_the_prompt_held(client):
    response = await client.post(
        "/v1/answer",
        json={"question": "Does sleep improve recall?", "max_tokens": 4, "stream": False},
    )
    assert response.status_code == 200, response.text[:300]
    body = response.json()
    assert body["top_k"] == 2 and body["prompt_tokens"] + 4 <= 1024
    for result in body["results"]:
        # 40 sentences of about 15 tokens cannot fit 96: whole sentences are kept.
        assert result["trimmed"] and result["text"].endswith("adults.")
        assert result["char_end"] - result["char_start"] == len(result["text"])
        assert 2 <= result["text"].count("Slow-wave") < 40


async def test_an_answer_is_checked_once(client, service, monkeypatch):
    """Before: the route checked the request, then the stream checked it again (the question
    counted twice, every collection listed twice to find one)."""
    await client.post("/v1/collections", json={"name": "checked-once"})
    counted: list[str] = []
    lookups: list[str] = []
    count_tokens = service.llm.count_tokens

    async def counting(texts: list[str]) -> list[int]:
        counted.extend(texts)
        return await count_tokens(texts)

    def looking(name, method):
        async def look(*args):
            lookups.append(name)
            return await method(*args)

        return look

    index = service.components.index
    monkeypatch.setattr(service.llm, "count_tokens", counting)
    for name in ("has_collection", "list_collections"):
        monkeypatch.setattr(index, name, looking(name, getattr(index, name)))
    question = "Does slow-wave sleep improve recall?"
    body = {"question": question, "max_tokens": 8}
    response = await client.post("/v1/collections/checked-once/answer", json=body)
    assert response.status_code == 200, response.text[:300]
    assert counted.count(question) == 1
    assert lookups == ["has_collection"]
