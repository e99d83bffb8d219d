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


@pytest.mark.asyncio(loop_scope="session")
async def test_a_completion_past_its_deadline_is_cancelled_in_the_llm_replica(
    serve_url, serve_config, indexed
):
    """Understanding's call (``RemoteLLM.complete``, the adapter the ingress uses) given up
    by its ``asyncio.timeout`` while the replica generates: the replica's generation stops
    and its slot is free within a second (main let it run its 400 tokens for nobody)."""
    from ray import serve

    from deployments.replicas.handles import RemoteLLM
    from serve_app.generation import GenerationParams, Message

    llm = serve.get_deployment_handle("llm", service_config(serve_config).serve.app_name)
    remote = RemoteLLM(llm, await llm.info.remote(), retry_after_s=1)
    before = await llm.stats.remote()
    call = [Message("user", "Write a very long story about sleep.")]
    params = GenerationParams(max_tokens=400, temperature=1.0, seed=1)

    async def understand() -> None:
        async with asyncio.timeout(None) as deadline:
            watching = asyncio.create_task(expire_when_generating(deadline))
            try:
                await remote.complete(call, params)
            finally:
                watching.cancel()

    async def expire_when_generating(deadline: asyncio.Timeout) -> None:
        while (await llm.stats.remote())["tokens_generated"] <= before["tokens_generated"]:
            await asyncio.sleep(0.05)
        deadline.reschedule(asyncio.get_running_loop().time())  # the deadline passes now

    with pytest.raises(TimeoutError):
        await understand()
    given_up = time.time()
    while (await llm.stats.remote())["active"] and time.time() < given_up + 1:
        await asyncio.sleep(0.05)
    stopped = await llm.stats.remote()
    assert stopped["active"] == 0, stopped
    assert stopped["streams_stopped"] == before["streams_stopped"] + 1, (before, stopped)
    assert stopped["tokens_generated"] - before["tokens_generated"] < 300
    await asyncio.sleep(1)
    assert (await llm.stats.remote())["tokens_generated"] == stopped["tokens_generated"]


@pytest.mark.asyncio(loop_scope="session")
async def test_a_client_hanging_up_before_the_first_byte_stops_the_llm(
    serve_url, serve_config, indexed
):
    """A client that leaves while its answer is still before its first byte (understanding,
    retrieval, the prompt's reading: the headers are held until the first event): nothing
    generates on for it."""
    from ray import serve

    llm = serve.get_deployment_handle("llm", service_config(serve_config).serve.app_name)
    before = await llm.stats.remote()
    body = {"question": "Tell me all about sleep. " * 60, "max_tokens": 1000, "understand": False}
    async with httpx.AsyncClient(base_url=serve_url, timeout=120) as client:
        asked = asyncio.create_task(
            client.post("/v1/collections/sleep/answer", json=body, headers=A)
        )
        deadline = time.time() + 30
        while not (await llm.stats.remote())["active"] and time.time() < deadline:
            await asyncio.sleep(0.02)
        asked.cancel()  # the connection closes: the proxy tells the ingress
        await asyncio.gather(asked, return_exceptions=True)
    left = time.time()
    while (await llm.stats.remote())["active"] and time.time() < left + 10:
        await asyncio.sleep(0.05)
    stopped = await llm.stats.remote()
    assert stopped["active"] == 0, stopped
    # Closed while it still ran (main ran it to its end for nobody), far short of its 1,000.
    assert stopped["streams_stopped"] == before["streams_stopped"] + 1, (before, stopped)
    assert stopped["tokens_generated"] - before["tokens_generated"] < 600, (before, stopped)
    await asyncio.sleep(1)
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


@pytest.mark.asyncio(loop_scope="session")
async def test_llamaindex_and_the_sdks_own_errors_through_serve(serve_url, serve_config, indexed):
    """LlamaIndex's OpenAILike answers and streams through Serve; a 10,000-character user
    message over the question budget is the SDK's ``BadRequestError`` with
    ``context_length_exceeded``, streamed or not; and an LLM replica with every slot and
    queue place taken is the SDK's ``RateLimitError``, which its own retry (Retry-After)
    rides out once the slots free: the 429 is decided before the first byte."""
    import openai
    from llama_index.core.llms import ChatMessage
    from llama_index.llms.openai_like import OpenAILike
    from ray import serve

    base = f"{serve_url}/v1/collections/sleep"
    ours = {"serve_app": {"understand": False}}
    llama = OpenAILike(model="sleep", api_base=base, api_key="key-a", is_chat_model=True,
                       max_tokens=12, temperature=0, max_retries=0, timeout=300,
                       additional_kwargs={"extra_body": ours})  # fmt: skip
    question = [ChatMessage(role="user", content="Do naps help memory?")]
    reply = await llama.achat(question)
    streamed = [chunk.delta async for chunk in await llama.astream_chat(question)]
    assert reply.message.content and "".join(d or "" for d in streamed) == reply.message.content

    attempts: list[int] = []

    async def counted(response: httpx.Response) -> None:
        attempts.append(response.status_code)

    http = httpx.AsyncClient(timeout=300, event_hooks={"response": [counted]})

    def sdk(retries: int) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=base, api_key="key-a", max_retries=retries, http_client=http
        )

    ask = {"model": "sleep", "max_tokens": 8, "extra_body": ours,
           "messages": [{"role": "user", "content": "Do naps help memory?"}]}  # fmt: skip
    long = [{"role": "user", "content": ("context " * 1250)[:9_990] + "Do naps help memory?"}]
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as over:
            await sdk(0).chat.completions.create(**{**ask, "messages": long}, stream=stream)
        assert over.value.code == "context_length_exceeded" and over.value.param == "messages"

    llm = serve.get_deployment_handle("llm", service_config(serve_config).serve.app_name)
    hold = {"question": "Tell me all about sleep.", "max_tokens": 400, "understand": False}
    holders = [
        asyncio.create_task(
            http.post(f"{serve_url}/v1/collections/sleep/answer", json=hold, headers=A)
        )
        for _ in range(6)  # llm.parallel 2 + llm.max_queued 4
    ]
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            stats = await llm.stats.remote()
            if stats["active"] + stats["waiting"] >= 6:
                break
            await asyncio.sleep(0.1)
        for stream in (False, True):
            with pytest.raises(openai.RateLimitError) as refused:
                await sdk(0).chat.completions.create(**ask, stream=stream)
            assert refused.value.code == "OVERLOADED"
            assert float(refused.value.response.headers["retry-after"]) > 0

        async def release() -> None:
            await asyncio.sleep(0.5)
            for holder in holders:
                holder.cancel()  # hanging up stops their generations (test above)

        attempts.clear()
        freed = asyncio.create_task(release())
        done = await sdk(3).chat.completions.create(**ask)
        await freed
        assert done.choices[0].message.content
        assert attempts[0] == 429 and attempts[-1] == 200, attempts
    finally:
        for holder in holders:
            holder.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        await http.aclose()


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


# SmolLM2 at temperature 0 answers this with a passage's mark (the playground's in-process test
# asks the same: tests/serve_app/api/test_playground.py).
CITING_QUESTION = "Quote passage [1] and cite it."


def test_the_playground_on_serve_says_401_then_streams_an_answer_whose_citation_it_highlights(
    serve_url, indexed
):
    """The playground page as served by the Serve application (keys required, SmolLM2 in its
    own replica; issue 58): before a key and with a wrong one it says 401 with the request
    id; with the right key it lists the tenant's collection, streams the answer to a question
    on it, and a click on the answer's citation mark highlights, in the cited passage, the
    span the server checked (the same answer asked through the API, not streamed)."""
    from tests.support.browser import playground

    message = "(el) => el.className.includes('ok') || el.className.includes('error')"
    with playground(serve_url) as opened:
        page = opened.page
        page.wait_for_function("() => document.querySelector('#collection-message').textContent")
        assert "401" in page.locator("#collection-message").inner_text()
        page.fill("#credential", "wrong-key")
        page.click("#credentials button[type=submit]")
        page.fill("#question", CITING_QUESTION)
        page.click("#answer-form button[type=submit]")
        page.wait_for_function(message, arg=page.locator("#answer-message").element_handle())
        refused = page.locator("#answer-message").inner_text()
        assert refused.startswith("401 UNAUTHENTICATED") and "request" in refused, refused

        page.fill("#credential", "key-a")
        page.click("#credentials button[type=submit]")
        page.wait_for_function(
            "() => [...document.querySelectorAll('#collection option')]"
            ".some((o) => o.value === 'sleep')"
        )
        page.select_option("#collection", "sleep")
        page.click("#answer-form button[type=submit]")
        page.wait_for_function(
            "() => document.querySelector('#answer-message').textContent.startsWith('done')",
            timeout=180_000,
        )
        assert page.locator("#passages > li").count() == 2
        link = page.locator("#answer a.cite").first
        number = int(link.inner_text().strip("[]"))
        link.click()
        card = page.locator(f"#passage-{number}")
        assert "active" in (card.get_attribute("class") or "")
        assert page.evaluate("document.activeElement.id") == f"passage-{number}"
        highlighted = card.locator("mark.cited").inner_text()
    assert all(u.startswith(serve_url + "/") for u in opened.requests), opened.requests
    assert not [u for u in opened.requests if "key-a" in u], opened.requests
    assert not opened.errors, opened.errors
    done = httpx.post(
        f"{serve_url}/v1/collections/sleep/answer",
        json={"question": CITING_QUESTION, "stream": False},
        headers=A,
        timeout=180,
    ).json()
    (citation,) = [c for c in done["citations"] if c["number"] == number][:1]
    assert highlighted == citation["text"][citation["span_start"] : citation["span_end"]]
