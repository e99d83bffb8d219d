"""HAProxy's rules that name the client (``client_rules``), run by the real HAProxy that Ray
Serve ships in front of a server that echoes what it received: a client's own
``X-Forwarded-For`` never names it; from a trusted proxy, the address that proxy added does."""

from __future__ import annotations

import asyncio
import subprocess
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from deployments.local.instance import client_rules
from serve_app.ports import free_port
from tests.support.uvicorn_server import served

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def echo(request: Request) -> JSONResponse:
    return JSONResponse({k.lower(): v for k, v in request.headers.items()})


async def seen_through_haproxy(tmp_path, trusted: str, forwarded: str | None) -> dict:
    from ray.serve._private.haproxy import get_haproxy_binary

    async with served(Starlette(routes=[Route("/", echo)])) as upstream:
        port = free_port()
        config = tmp_path / "haproxy.cfg"
        config.write_text(
            "defaults\n    mode http\n    timeout client 5s\n    timeout server 5s\n"
            f"    timeout connect 5s\nfrontend front\n    bind 127.0.0.1:{port}\n"
            f"{client_rules(trusted)}    default_backend back\nbackend back\n"
            f"    server echo {upstream.removeprefix('http://')}\n"
        )
        process = subprocess.Popen([get_haproxy_binary(), "-f", str(config)])
        try:
            headers = {"X-Forwarded-For": forwarded} if forwarded else {}
            headers["Forwarded"] = "for=192.0.2.66"
            deadline = time.monotonic() + 20
            async with httpx.AsyncClient() as http:
                while True:
                    try:
                        answer = await http.get(f"http://127.0.0.1:{port}/", headers=headers)
                        return answer.json()
                    except httpx.TransportError:
                        assert time.monotonic() < deadline, "HAProxy did not start"
                        await asyncio.sleep(0.1)
        finally:
            process.terminate()
            process.wait(10)


@pytest.mark.parametrize(
    "trusted,forwarded,client",
    [
        ("", "203.0.113.9", "127.0.0.1"),  # a client naming itself
        ("", None, "127.0.0.1"),
        ("10.0.0.0/8", "203.0.113.9", "127.0.0.1"),  # 127.0.0.1 is no trusted proxy here
        ("127.0.0.0/8", "198.51.100.7, 203.0.113.9", "203.0.113.9"),  # what the proxy added
        ("127.0.0.0/8, fd00::/8", None, "127.0.0.1"),  # a trusted proxy that names nobody
    ],
)
async def test_haproxy_names_the_client_whatever_it_sent(tmp_path, trusted, forwarded, client):
    seen = await seen_through_haproxy(tmp_path, trusted, forwarded)
    assert seen["x-serve-app-client"] == client, seen
    assert seen["x-forwarded-for"] == client, seen
    assert "forwarded" not in seen
