"""Answers through a real local Ray Serve application: the LLM deployment (SmolLM2 on
llama.cpp, its own replica) streams to the ingress over Serve's handles, and a client that
hangs up stops the generation in the LLM replica."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from deployments.settings import service_config

A = {"X-API-Key": "key-a"}
DOCS = [
    {
        "id": "naps",
        "title": "Naps and memory",
        "text": "A short afternoon nap improved memory for faces the next day in adults.",
    },
    {
        "id": "spindles",
        "title": "Sleep spindles",
        "text": "Sleep spindle density predicted overnight gains in word-pair memory.",
    },
]


def events_of(body: str) -> list[tuple[str, dict]]:
    out = []
    for block in body.strip().split("\n\n"):
        # Heartbeat comments (": ...") and the retry hint carry no event.
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line[:1] != ":")
        if "event" in fields:
            out.append((fields["event"], json.loads(fields["data"])))
    return out


@pytest.fixture(scope="module")
def indexed(serve_url):
    with httpx.Client(base_url=serve_url, timeout=300) as client:
        response = client.post("/v1/collections", json={"name": "sleep"}, headers=A)
        assert response.status_code == 201, response.text
        response = client.post(
            "/v1/collections/sleep/documents", json={"documents": DOCS}, headers=A
        )
        assert response.status_code == 200, response.text


def test_an_answer_streams_from_the_llm_deployment(http, indexed):
    response = http.post(
        "/v1/collections/sleep/answer",
        json={"question": "Do naps help memory?", "max_tokens": 48, "understand": False},
        headers=A,
    )
    assert response.status_code == 200, response.text
    events = events_of(response.text)
    kinds = [kind for kind, _ in events]
    assert kinds[0] == "metadata" and kinds[-1] == "done" and "delta" in kinds
    metadata, done = events[0][1], events[-1][1]
    assert metadata["model"] == "catalog:smollm2-135m-instruct-q4_1"
    assert metadata["collection"] == "sleep"
    assert {r["doc_id"] for r in metadata["results"]} == {"naps", "spindles"}
    text = "".join(data["text"] for kind, data in events if kind == "delta")
    assert done["answer"] == text and done["usage"]["completion_tokens"] > 0
    assert "first_token" in done["timings_ms"]


def test_the_structured_understanding_call_runs_in_the_llm_replica(http, indexed):
    response = http.post(
        "/v1/collections/sleep/answer",
        json={"question": "Do naps help memory?", "max_tokens": 8, "multi_query": True},
        headers=A,
    )
    events = events_of(response.text)
    assert events[0][0] == "metadata" and events[-1][0] == "done"
    understanding = events[0][1]["understanding"]
    assert understanding["valid"] is True, understanding  # the schema held across Serve
    assert "understand" in events[0][1]["timings_ms"]


@pytest.mark.asyncio(loop_scope="session")
async def test_a_client_hanging_up_stops_the_generation_in_the_llm_replica(
    serve_url, serve_config, indexed
):
    from ray import serve

    llm = serve.get_deployment_handle("llm", service_config(serve_config).serve.app_name)
    before = await llm.stats.remote()  # the module's other answers count too
    body = {"question": "Tell me all about sleep.", "max_tokens": 500, "understand": False}
    async with (
        httpx.AsyncClient(base_url=serve_url, timeout=120) as client,
        client.stream("POST", "/v1/collections/sleep/answer", json=body, headers=A) as response,
    ):
        assert response.status_code == 200
        deltas = 0
        async for line in response.aiter_lines():
            deltas += line == "event: delta"
            if deltas == 3:
                break
    deadline = time.time() + 10
    while (await llm.stats.remote())["active"] and time.time() < deadline:
        await asyncio.sleep(0.2)
    stopped = await llm.stats.remote()
    assert stopped["active"] == 0, stopped
    # The replica's stream was closed while it still ran, not run to its end.
    assert stopped["streams_stopped"] == before["streams_stopped"] + 1, (before, stopped)
    assert stopped["tokens_generated"] - before["tokens_generated"] < 200  # of the 500
    await asyncio.sleep(1.5)
    assert (await llm.stats.remote())["tokens_generated"] == stopped["tokens_generated"]


def test_openai_and_langchain_clients_through_serve(serve_url, indexed):
    """The shipped topology (the LLM in its own replica behind Serve's handles): what the
    openai SDK and LangChain's ChatOpenAI send is answered, sampling crosses the handle
    (temperature 0 repeats itself, ``stop`` cuts), and ``tools`` is refused by name."""
    import openai
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    base = f"{serve_url}/v1/collections/sleep"
    client = openai.OpenAI(base_url=base, api_key="key-a", max_retries=0, timeout=300)
    assert [m.id for m in client.models.list().data] == ["sleep"]
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"Earlier turn {i}."}
        for i in range(69)
    ]
    ask = {"model": "sleep", "max_tokens": 16, "temperature": 0, "extra_body": {"serve_app": {"understand": False}}}  # fmt: skip
    question = [{"role": "user", "content": [{"type": "text", "text": "Do naps help memory?"}]}]
    first = client.chat.completions.create(messages=[*history, *question], **ask)
    again = client.chat.completions.create(messages=[*history, *question], **ask)
    text = first.choices[0].message.content
    assert text and again.choices[0].message.content == text
    stop = next(w for w in text.split()[2:] if text.index(w) > 0)
    cut = client.chat.completions.create(messages=question, stop=[stop], **ask)
    assert stop not in cut.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            messages=question, tools=[{"type": "function", "function": {"name": "f"}}], **ask
        )
    assert refused.value.param == "tools"

    chat = ChatOpenAI(base_url=base, api_key="key-a", model="sleep", max_tokens=16,
                      temperature=0, max_retries=0, stream_usage=True,
                      extra_body={"serve_app": {"understand": False}})  # fmt: skip
    agent = [
        SystemMessage("Be brief."),
        HumanMessage("Look it up."),
        AIMessage("", tool_calls=[{"name": "lookup", "args": {}, "id": "c1"}]),
        ToolMessage("no result", tool_call_id="c1"),
        HumanMessage("Do naps help memory?"),
    ]
    chunks = list(chat.stream(agent))
    streamed = sum(chunks[1:], chunks[0])
    assert streamed.content and streamed.usage_metadata["output_tokens"] > 0


def test_an_overloaded_llm_replica_is_a_429_before_any_byte(serve_url, indexed):
    """More answers at once than the LLM replica has slots and queue for (2 + 4): the excess
    is refused with HTTP 429 and Retry-After, so clients back off, never a 200 whose stream
    carries OVERLOADED (main answered every one 200 through Serve)."""

    async def burst() -> list[httpx.Response]:
        body = {"question": "Do naps help memory?", "max_tokens": 48, "understand": False}
        async with httpx.AsyncClient(base_url=serve_url, timeout=300) as client:
            return await asyncio.gather(
                *(client.post("/v1/collections/sleep/answer", json=body, headers=A)
                  for _ in range(12))
            )  # fmt: skip

    responses = asyncio.run(burst())
    refused = [r for r in responses if r.status_code == 429]
    answered = [r for r in responses if r.status_code == 200]
    assert refused and answered and len(refused) + len(answered) == len(responses)
    assert all(r.headers.get("retry-after") and r.json()["error"]["code"] == "OVERLOADED"
               for r in refused)  # fmt: skip
    for response in answered:
        kinds = [kind for kind, _ in events_of(response.text)]
        assert kinds[-1] == "done", kinds
