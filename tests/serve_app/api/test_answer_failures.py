"""How answers fail, over the in-process API with the real SmolLM2 engine: a JSON answer whose
generation failed is an error status with the envelope, an exception after the headers ends
the stream with an ``error`` event, the iterator closed at its first event stops the
generation, each deadline applies once and ``X-Request-Timeout-Ms`` bounds the whole answer.

``Slowed`` and ``Exploding`` are test doubles wrapping the real engine: they add a delay or
raise an unexpected exception at the boundary the service reacts to, which is what is tested."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from serve_app.api.app import create_app
from serve_app.generation import build_llm
from serve_app.generation.base import GenerationParams, Message
from serve_app.schemas import AnswerRequest, ScopeKey
from tests.serve_app.api.test_answer_api import ANSWER, make_service, parse_sse
from tests.support.data import SMOLLM2

pytestmark = pytest.mark.asyncio(loop_scope="session")

QUESTION = {"question": "Does sleep help memory?", "max_tokens": 8}


class Slowed:
    """Test double: the real LLM, with ``admit_s`` before a stream is admitted and
    ``first_s`` before its first delta (a busy replica, a long prompt)."""

    def __init__(self, llm, admit_s: float = 0.0, first_s: float = 0.0) -> None:
        self.llm, self.admit_s, self.first_s = llm, admit_s, first_s
        self.model_id = llm.model_id
        self.slots = llm.slots

    async def complete(self, messages: list[Message], params: GenerationParams):
        return await self.llm.complete(messages, params)

    async def count_tokens(self, texts: list[str]) -> list[int]:
        return await self.llm.count_tokens(texts)

    async def count_prompt_tokens(self, messages: list[Message]) -> int:
        return await self.llm.count_prompt_tokens(messages)

    async def as_read(self, texts: list[str]) -> list[str]:
        return await self.llm.as_read(texts)

    async def open_stream(self, messages: list[Message], params: GenerationParams):
        await asyncio.sleep(self.admit_s)
        return _SlowStream(await self.llm.open_stream(messages, params), self.first_s)


class _SlowStream:
    def __init__(self, inner, first_s: float, explode_after: int | None = None) -> None:
        self.inner, self.first_s, self.explode_after = inner, first_s, explode_after

    @property
    def usage(self):
        return self.inner.usage

    @property
    def finish_reason(self):
        return self.inner.finish_reason

    async def __aiter__(self):
        await asyncio.sleep(self.first_s)
        seen = 0
        async for delta in self.inner:
            if seen == self.explode_after:
                raise RuntimeError("a bug in the adapter")
            seen += 1
            yield delta

    async def aclose(self) -> None:
        await self.inner.aclose()


class Exploding(Slowed):
    """Test double: the real LLM whose stream raises an unexpected exception after 2 deltas."""

    async def open_stream(self, messages: list[Message], params: GenerationParams):
        return _SlowStream(await self.llm.open_stream(messages, params), 0.0, explode_after=2)


@pytest.fixture(scope="module")
def engine(app_config_factory):
    llm = build_llm(app_config_factory(llm=SMOLLM2).llm)
    yield llm
    llm.close()


async def serve(app_config_factory, llm, **answer):
    config = app_config_factory(llm=SMOLLM2, answer={**ANSWER, **answer})
    service = await make_service(config, llm)
    transport = httpx.ASGITransport(app=create_app(service))
    return service, httpx.AsyncClient(transport=transport, base_url="http://t", timeout=60)


async def test_a_json_answer_whose_llm_failed_is_an_error_status_with_the_envelope(
    app_config_factory,
):
    llm = build_llm(app_config_factory(llm=SMOLLM2).llm)
    service, http = await serve(app_config_factory, llm)
    llm.close()  # the engine is gone
    try:
        response = await http.post("/v1/answer", json={**QUESTION, "stream": False})
        assert response.status_code == 503, response.text
        body = response.json()
        assert body["error"]["code"] == "SERVICE_UNAVAILABLE"
        assert body["error"]["request_id"] == response.headers["x-request-id"]
        assert body["results"], "the search results still come with the error"
    finally:
        await http.aclose()
        await service.components.close()


async def test_an_unexpected_exception_after_the_headers_ends_with_an_error_event(
    app_config_factory, engine
):
    service, http = await serve(app_config_factory, Exploding(engine))
    try:
        response = await http.post("/v1/answer", json={**QUESTION, "max_tokens": 32})
        assert response.status_code == 200
        events = parse_sse(response.text)
        assert [kind for kind, _ in events] == ["metadata", "delta", "delta", "error"]
        assert events[-1][1]["code"] == "INTERNAL"
        assert "RuntimeError" in events[-1][1]["message"]
        assert engine.slots.active == 0 and await engine.engine_requests() == 0
    finally:
        await http.aclose()
        await service.components.close()


async def test_closing_the_events_at_the_metadata_stops_the_generation(app_config_factory, engine):
    config = app_config_factory(llm=SMOLLM2, answer=ANSWER)
    service = await make_service(config, engine)
    try:
        pipeline = service.answer_pipeline
        request = AnswerRequest(question="Tell me everything about sleep.", max_tokens=400)
        prepared = await pipeline.prepare(
            await pipeline.check(request, ScopeKey("default", request.collection))
        )
        events = pipeline.events(prepared)
        first = await anext(events)
        assert first.event == "metadata"
        await events.aclose()  # what Ray Serve does when it cancels the streaming call
        assert engine.slots.active == 0
        assert await engine.engine_requests() == 0
    finally:
        await service.components.close()


async def test_the_first_token_deadline_counts_the_wait_for_a_slot_once(app_config_factory, engine):
    """Admission takes 0.7 s and the first token 0.7 s more: 1.4 s in all, past a 1 s
    ``first_token_s`` (each part alone is within it)."""
    deadlines = {"first_token_s": 1.0, "understand_s": 20, "retrieve_s": 15, "total_s": 60}
    service, http = await serve(
        app_config_factory, Slowed(engine, admit_s=0.7, first_s=0.7), deadlines=deadlines
    )
    try:
        events = parse_sse((await http.post("/v1/answer", json=QUESTION)).text)
        assert [kind for kind, _ in events] == ["metadata", "error"]
        assert events[1][1]["code"] == "TIMEOUT"
        assert "first_token_s" in events[1][1]["message"]
        assert engine.slots.active == 0
    finally:
        await http.aclose()
        await service.components.close()


@pytest.mark.parametrize("stream", [True, False])
async def test_the_request_timeout_header_bounds_the_whole_answer(
    app_config_factory, engine, stream
):
    service, http = await serve(app_config_factory, Slowed(engine, first_s=3.0))
    try:
        began = time.perf_counter()
        response = await http.post(
            "/v1/answer",
            json={**QUESTION, "stream": stream},
            headers={"X-Request-Timeout-Ms": "1000"},
        )
        assert time.perf_counter() - began < 2.5
        if stream:
            events = parse_sse(response.text)
            assert [kind for kind, _ in events] == ["metadata", "error"]
            error = events[1][1]
        else:
            assert response.status_code == 504
            error = response.json()["error"]
        assert error["code"] == "TIMEOUT" and "1s" in error["message"]
        assert engine.slots.active == 0
    finally:
        await http.aclose()
        await service.components.close()


async def test_the_stream_starts_at_once_and_beats_while_nothing_is_due(app_config_factory, engine):
    service, http = await serve(
        app_config_factory, Slowed(engine, admit_s=0.6, first_s=0.6), heartbeat_s=0.15
    )
    try:
        async with http.stream("POST", "/v1/answer", json=QUESTION) as response:
            chunks = []
            async for chunk in response.aiter_text():
                chunks.append(chunk)
        body = "".join(chunks)
        assert body.startswith("retry: ")
        before_metadata = body[: body.index("event: metadata")]
        assert before_metadata.count(": keep-alive") >= 2  # the wait for the slot
        after = body[body.index("event: metadata") : body.index("event: delta")]
        assert after.count(": keep-alive") >= 2  # the wait for the first token
        ids = [line[4:] for line in body.splitlines() if line.startswith("id: ")]
        events = parse_sse(body)
        answer_id = ids[0].split(":")[0]  # one answer's id, its events numbered from 1
        assert ids == [f"{answer_id}:{n}" for n in range(1, len(events) + 1)]
        assert events[-1][0] == "done"
    finally:
        await http.aclose()
        await service.components.close()


async def test_readiness_reports_the_llm_without_gating_on_it(app_config_factory):
    llm = build_llm(app_config_factory(llm=SMOLLM2).llm)
    service, http = await serve(app_config_factory, llm)
    try:
        body = (await http.get("/readyz")).json()
        assert body["checks"]["llm"] == "ok" and body["ready"] is True
        llm.close()
        response = await http.get("/readyz")
        assert response.json()["checks"]["llm"] == "failing"
        assert response.status_code == 200 and response.json()["ready"] is True
    finally:
        await http.aclose()
        await service.components.close()
