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
from serve_app.generation.base import GenerationParams, Message
from serve_app.ports import free_port
from tests.serve_app.api.test_answer_api import ANSWER, make_service
from tests.support.data import SMOLLM2

pytestmark = pytest.mark.asyncio(loop_scope="session")

KEYS = {"key-default": "default", "key-other": "other"}
QUESTION = "Does sleep help memory?"
SMALL = {"max_tokens": 12, "extra_body": {"serve_app": {"top_k": 2}}}


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
    assert {m.object for m in models.data} == {"model"}
    return "default"


async def test_each_collection_is_a_model(base_url):
    models = await client(base_url).models.list()
    assert "default" in {m.id for m in models.data}
    assert (await client(base_url).models.retrieve("default")).id == "default"
    with pytest.raises(openai.NotFoundError) as missing:
        await client(base_url).models.retrieve("gpt-4o")
    assert missing.value.code == "model_not_found" and missing.value.param == "model"
    with pytest.raises(openai.NotFoundError) as unknown:
        await client(base_url).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": QUESTION}], max_tokens=4
        )
    assert unknown.value.code == "model_not_found"
    # The LLM's own id (what /models listed before collections were models) still answers.
    done = await client(base_url).chat.completions.create(
        model=SMOLLM2["model"], messages=[{"role": "user", "content": QUESTION}], **SMALL
    )
    assert done.choices[0].message.content and done.model == SMOLLM2["model"]


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


async def test_an_over_budget_request_is_openais_context_length_exceeded(base_url):
    """A 10,000-character user message (a stuff-chain's context) is the budget's to judge:
    over it, the error OpenAI's clients trim their history on, before any byte is streamed."""
    for stream in (True, False):
        with pytest.raises(openai.BadRequestError) as refused:
            await client(base_url).chat.completions.create(
                model="default",
                messages=[{"role": "user", "content": ("context " * 1250)[:9_990] + QUESTION}],
                stream=stream,
            )
        assert refused.value.code == "context_length_exceeded"
        assert refused.value.param == "messages"
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
            model="papers", messages=[{"role": "user", "content": QUESTION}], max_tokens=4
        )
    assert missing.value.code == "NOT_FOUND"
    with pytest.raises(openai.BadRequestError) as invalid:
        await client(base_url).chat.completions.create(
            model="default", messages=[{"role": "assistant", "content": "hello"}]
        )
    assert invalid.value.code == "INVALID_INPUT" and invalid.value.param == "messages[0]"


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
    assert (empty.status_code, empty.json()["error"]["type"]) == (400, "invalid_request_error")
    assert refused.status_code == 401
    operation = schema["paths"]["/v1/chat/completions"]["post"]
    for response in (empty, refused):
        published = operation["responses"][str(response.status_code)]
        ref = published["content"]["application/json"]["schema"]
        jsonschema.validate(response.json(), {**ref, "components": schema["components"]})


async def test_what_chat_and_agent_clients_send_is_answered(base_url):
    """Open WebUI's content parts, an agent's tool call and result, a developer message and
    a 70-message history: answered, streamed and not (main refused each with a 422)."""
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"Earlier turn {i} on naps."}
        for i in range(66)
    ]
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "Answer in one sentence."}]},
        *history,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "lookup result"},
        {"role": "user", "content": [{"type": "text", "text": QUESTION}]},
    ]
    assert len(messages) == 70
    whole = await client(base_url).chat.completions.create(
        model="default", messages=messages, **SMALL
    )
    assert whole.choices[0].message.content
    stream = await client(base_url).chat.completions.create(
        model="default", messages=messages, stream=True, **SMALL
    )
    assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]).strip()
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    with pytest.raises(openai.BadRequestError) as refused:
        await client(base_url).chat.completions.create(
            model="default", messages=[{"role": "user", "content": [image]}], **SMALL
        )
    assert refused.value.param == "messages[0].content[0]"


async def test_sampling_fields_are_honoured(base_url):
    """temperature 0 repeats itself; a high temperature with a seed draws other text, the
    same again for the same seed; ``stop`` ends the answer where the stop string would
    start (main sampled at the configured temperature whatever was asked, and ignored stop)."""
    ask = {
        "model": "default",
        "messages": [{"role": "user", "content": QUESTION}],
        "max_tokens": 24,
        "extra_body": {"serve_app": {"top_k": 2}},
    }

    async def text(**extra) -> tuple[str, str]:
        done = await client(base_url).chat.completions.create(**ask, **extra)
        return done.choices[0].message.content, done.choices[0].finish_reason

    greedy, _ = await text(temperature=0)
    assert (await text(temperature=0))[0] == greedy
    hot = [(await text(temperature=1.9, top_p=1, seed=seed))[0] for seed in (1, 2, 1)]
    assert hot[0] == hot[2] and hot[0] != hot[1] and greedy not in hot[:2]
    words = greedy.split()
    stop = next(w for w in words[2:] if greedy.index(w) > 0)
    stopped, finish = await text(temperature=0, stop=[stop])
    assert stopped.rstrip() == greedy[: greedy.index(stop)].rstrip() and finish == "stop"


async def test_include_usage_is_one_chunk_of_its_own(base_url):
    stream = await client(base_url).chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": QUESTION}],
        stream=True,
        stream_options={"include_usage": True},
        **SMALL,
    )
    chunks = [chunk async for chunk in stream]
    with_usage = [c for c in chunks if c.usage is not None]
    assert with_usage == [chunks[-1]] and chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens > 0
    assert chunks[-2].choices[0].finish_reason in ("stop", "length")


async def test_langchains_chat_openai_answers_streams_and_is_told_what_it_cannot_have(base_url):
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel

    chat = ChatOpenAI(
        base_url=base_url,
        api_key="key-default",
        model="default",
        max_tokens=12,
        temperature=0,
        max_retries=0,
        stream_usage=True,
        extra_body={"serve_app": {"top_k": 2}},
    )
    reply = await chat.ainvoke([SystemMessage("Be brief."), HumanMessage(QUESTION)])
    assert reply.content and reply.usage_metadata["output_tokens"] > 0
    chunks = [chunk async for chunk in chat.astream([SystemMessage("Be brief."), QUESTION])]
    streamed = sum(chunks[1:], chunks[0])
    assert streamed.content == reply.content
    # One usage for the answer, as the whole completion reports it (not counted twice).
    assert streamed.usage_metadata["output_tokens"] == reply.usage_metadata["output_tokens"]
    # An agent's turn: its tool call and the tool's result come back in the history.
    agent = [
        HumanMessage("Look up naps."),
        AIMessage("", tool_calls=[{"name": "lookup", "args": {}, "id": "c1"}]),
        ToolMessage("no result", tool_call_id="c1"),
        HumanMessage(QUESTION),
    ]
    assert (await chat.ainvoke(agent)).content

    class Verdict(BaseModel):
        supported: bool

    with pytest.raises(openai.BadRequestError) as structured:
        await chat.with_structured_output(Verdict).ainvoke(QUESTION)
    assert structured.value.param in ("response_format", "tools")
    with pytest.raises(openai.BadRequestError) as tools:
        await chat.bind_tools([Verdict]).ainvoke(QUESTION)
    assert tools.value.param == "tools"


async def test_overload_is_the_sdks_rate_limit_error_and_its_retry_succeeds(app_config_factory):
    config = app_config_factory(
        llm={**SMOLLM2, "parallel": 1, "max_queued": 0, "retry_after_s": 1}, answer=ANSWER
    )
    llm = build_llm(config.llm)
    service = await make_service(config, llm)
    attempts: list[str] = []

    async def count(request: httpx.Request) -> None:
        attempts.append(request.url.path)

    transport = httpx.ASGITransport(app=create_app(service))
    http = httpx.AsyncClient(transport=transport, event_hooks={"request": [count]})
    ask = {"model": "default", "messages": [{"role": "user", "content": QUESTION}], **SMALL}

    def sdk(retries: int) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url="http://t/v1", api_key="k", http_client=http, max_retries=retries
        )

    try:
        busy = await llm.open_stream(
            [Message("user", "Write a long story.")], GenerationParams(max_tokens=300)
        )
        for stream in (False, True):
            with pytest.raises(openai.RateLimitError) as refused:
                await sdk(0).chat.completions.create(**ask, stream=stream)
            assert refused.value.code == "OVERLOADED"
            assert refused.value.response.headers["retry-after"] == "1"

        async def release() -> None:
            await asyncio.sleep(0.3)
            await busy.aclose()

        attempts.clear()
        freed = asyncio.create_task(release())
        done = await sdk(2).chat.completions.create(**ask)
        await freed
        assert done.choices[0].message.content
        assert attempts == ["/v1/chat/completions"] * 2  # refused, waited Retry-After, answered
    finally:
        await http.aclose()
        await service.components.close()
        llm.close()


async def test_llamaindexs_openai_like_answers_and_streams(base_url):
    """LlamaIndex's ``OpenAILike`` (what its RAG and agent stacks call a self-hosted model
    through): chat and streamed chat with a system message and content blocks, the passage
    count under our own ``extra_body`` name, and ``tools`` refused by name."""
    from llama_index.core.llms import ChatMessage, TextBlock
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(
        model="default",
        api_base=base_url,
        api_key="key-default",
        is_chat_model=True,
        max_tokens=12,
        temperature=0,
        max_retries=0,
        timeout=120,
        additional_kwargs={"extra_body": {"serve_app": {"top_k": 2}}},
    )
    messages = [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", blocks=[TextBlock(text=QUESTION)]),
    ]
    reply = await llm.achat(messages)
    assert reply.message.content
    deltas = [chunk.delta async for chunk in await llm.astream_chat(messages)]
    assert "".join(d or "" for d in deltas) == reply.message.content  # temperature 0
    with pytest.raises(openai.BadRequestError) as refused:
        await llm.achat(messages, tools=[{"type": "function", "function": {"name": "f"}}])
    assert refused.value.param == "tools"
