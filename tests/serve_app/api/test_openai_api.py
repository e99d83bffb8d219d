"""The OpenAI-compatible door with the official ``openai`` client against a local run (the
app served by uvicorn on 127.0.0.1, SmolLM2-135M on llama.cpp, the real encoders): a whole
completion and a stream with the passages and citations in the ``serve_app`` extension,
``models.list()``, an over-budget request as OpenAI's error with our code, and the API key as
``Authorization: Bearer`` scoping the tenant exactly as ``/v1/answer``."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from serve_app.api.app import create_app
from serve_app.api.auth import hash_api_key
from serve_app.generation import build_llm
from serve_app.ports import free_port
from tests.serve_app.api.test_answer_api import ANSWER, make_service
from tests.support.data import SMOLLM2

pytestmark = pytest.mark.asyncio(loop_scope="session")

KEYS = {"key-default": "default", "key-other": "other"}
QUESTION = "Does sleep help memory?"
SMALL = {"max_tokens": 12, "extra_body": {"top_k": 2}}


@pytest.fixture(scope="module")
async def base_url(app_config_factory):
    import uvicorn

    api_keys = [{"name": t, "sha256": hash_api_key(k), "tenant_id": t} for k, t in KEYS.items()]
    config = app_config_factory(
        llm=SMOLLM2, answer=ANSWER, api={"auth": {"mode": "required", "api_keys": api_keys}}
    )
    llm = build_llm(config.llm)
    service = await make_service(config, llm)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(service), host="127.0.0.1", port=port, log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    await serving
    await service.components.close()
    llm.close()


def client(base_url: str, key: str = "key-default") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=120)


async def model_id(base_url: str) -> str:
    models = await client(base_url).models.list()
    assert [m.object for m in models.data] == ["model"]
    return models.data[0].id


async def test_models_list_names_the_answering_model(base_url):
    assert (await model_id(base_url)) == SMOLLM2["model"]


async def test_a_whole_completion_carries_usage_and_the_citations_extension(base_url):
    completion = await client(base_url).chat.completions.create(
        model=await model_id(base_url),
        messages=[
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": QUESTION},
        ],
        **SMALL,
    )
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason in ("stop", "length")
    usage = completion.usage
    assert usage.completion_tokens > 0 and usage.prompt_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    extension = completion.model_extra["serve_app"]
    assert [r["passage"] for r in extension["results"]] == [1, 2]
    assert {"citations", "invalid_citations", "uncited_sentences"} <= set(extension)


async def test_a_stream_is_chunks_ending_with_usage_and_citations(base_url):
    stream = await client(base_url).chat.completions.create(
        model=await model_id(base_url),
        messages=[{"role": "user", "content": QUESTION}],
        stream=True,
        **SMALL,
    )
    chunks = [chunk async for chunk in stream]  # the client stops at data: [DONE]
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert len({c.id for c in chunks}) == 1
    first, last = chunks[0], chunks[-1]
    assert first.choices[0].delta.role == "assistant"
    assert len(first.model_extra["serve_app"]["results"]) == 2
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text.strip()
    assert last.choices[0].finish_reason in ("stop", "length")
    assert last.usage.completion_tokens > 0
    assert "citations" in last.model_extra["serve_app"]


async def test_an_over_budget_request_is_openais_422_with_our_code(base_url):
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        await client(base_url).chat.completions.create(
            model="any",
            messages=[{"role": "user", "content": QUESTION * 150}],
            stream=True,
        )
    assert refused.value.code == "PROMPT_TOO_LONG"
    assert refused.value.type == "invalid_request_error"
    assert "answer.max_question_tokens" in refused.value.message


async def test_the_bearer_key_scopes_the_tenant_as_the_answer_route_does(base_url):
    with pytest.raises(openai.AuthenticationError):
        await client(base_url, key="wrong").models.list()
    # Another tenant's collection is not found, through a base_url naming it.
    async with httpx.AsyncClient(headers={"Authorization": "Bearer key-default"}) as http:
        created = await http.post(f"{base_url}/collections", json={"name": "papers"})
    assert created.status_code in (200, 201, 409), created.text
    other = client(f"{base_url}/collections/papers", key="key-other")
    with pytest.raises(openai.NotFoundError) as missing:
        await other.chat.completions.create(
            model="any", messages=[{"role": "user", "content": QUESTION}], max_tokens=4
        )
    assert missing.value.code == "NOT_FOUND"
    with pytest.raises(openai.UnprocessableEntityError) as invalid:
        await client(base_url).chat.completions.create(
            model="any", messages=[{"role": "assistant", "content": "hello"}]
        )
    assert invalid.value.code == "INVALID_INPUT"


async def test_its_errors_match_the_schema_it_publishes(base_url):
    """What OpenAPI tools (and schemathesis in tests/e2e) read: the OpenAI-shaped error of a
    bad body and the plain envelope of a refused key both fit the route's error schema."""
    import jsonschema

    async with httpx.AsyncClient(headers={"Authorization": "Bearer key-default"}) as http:
        schema = (await http.get(f"{base_url.removesuffix('/v1')}/openapi.json")).json()
        empty = await http.post(f"{base_url}/chat/completions", json={})
        refused = await http.post(
            f"{base_url}/chat/completions", json={}, headers={"Authorization": "Bearer wrong"}
        )
    assert (empty.status_code, empty.json()["error"]["type"]) == (422, "invalid_request_error")
    assert refused.status_code == 401
    operation = schema["paths"]["/v1/chat/completions"]["post"]
    for response in (empty, refused):
        published = operation["responses"][str(response.status_code)]
        ref = published["content"]["application/json"]["schema"]
        jsonschema.validate(response.json(), {**ref, "components": schema["components"]})
