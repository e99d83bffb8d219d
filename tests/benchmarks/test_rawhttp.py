"""The load generator's HTTP client: a kept-alive connection the server closed while it was
idle is retried once on a new connection (and counted); any other failure is an error."""

import asyncio

import pytest

from benchmarks.rawhttp import HttpError, RawHttpPool

REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}"


async def serve(handler):
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def read_request(reader: asyncio.StreamReader) -> None:
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)


async def test_an_idle_connection_closed_by_the_server_is_retried_once():
    async def one_request_per_connection(reader, writer):
        await read_request(reader)
        writer.write(REPLY)  # keep-alive by default, then closed while idle
        await writer.drain()
        writer.close()

    server, url = await serve(one_request_per_connection)
    pool = RawHttpPool(url)
    try:
        assert (await pool.post_json("/", {})).status == 200
        await asyncio.sleep(0.05)  # the server has closed the kept connection
        assert (await pool.post_json("/", {})).status == 200
        assert pool.stale_retries == 1
    finally:
        await pool.close()
        server.close()


async def test_a_new_connection_that_fails_is_an_error_not_a_retry():
    async def close_at_once(reader, writer):
        await read_request(reader)
        writer.close()

    server, url = await serve(close_at_once)
    pool = RawHttpPool(url)
    try:
        with pytest.raises(HttpError):
            await pool.post_json("/", {})
        assert pool.stale_retries == 0
    finally:
        await pool.close()
        server.close()


async def test_the_retry_opens_a_new_connection_when_every_idle_one_was_closed():
    # HAProxy closes kept-alive connections idle past its header timeout (5 s): after a pause
    # every pooled connection is stale at once, and a retry on the next idle one failed too
    # ("connection closed by the server" in the GPU sweep at 250 QPS, 2026-11-30).
    async def one_request_per_connection(reader, writer):
        await read_request(reader)
        writer.write(REPLY)
        await writer.drain()
        writer.close()

    server, url = await serve(one_request_per_connection)
    pool = RawHttpPool(url)
    try:
        replies = await asyncio.gather(*(pool.post_json("/", {}) for _ in range(4)))
        assert [r.status for r in replies] == [200] * 4
        await asyncio.sleep(0.05)  # all four kept connections are closed by now
        assert (await pool.post_json("/", {})).status == 200
        assert pool.stale_retries == 1
    finally:
        await pool.close()
        server.close()
