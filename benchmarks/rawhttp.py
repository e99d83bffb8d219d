"""A minimal keep-alive HTTP/1.1 client for load generation on loopback.

On a 2-core machine the load generator shares the cores with the server it measures, so its
own cost per request matters: httpx spends about 1 CPU-ms per request, this client a small
fraction of that (pre-encoded request head, one read of the status line and headers, a
Content-Length or chunked body). It speaks only what the benchmarks need: POST/GET with a
body, responses with Content-Length or chunked transfer encoding, connection reuse.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from urllib.parse import urlparse


class HttpError(Exception):
    """The connection failed or the server's answer was not HTTP/1.1 we understand."""


class _StaleConnection(HttpError):
    """A reused connection the server had closed: nothing of a response was received."""


@dataclass
class Reply:
    status: int
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def exchange(self, head: bytes, body: bytes) -> tuple[Reply, bool]:
        """Send one request; returns the reply and whether the connection can be reused."""
        try:
            self.writer.write(head + body)
            status_line = await self.reader.readline()
        except ConnectionError as error:
            raise _StaleConnection(f"{type(error).__name__}: {error}") from None
        if not status_line:
            raise _StaleConnection("connection closed by the server")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise HttpError(f"bad status line {status_line[:80]!r}")
        status = int(parts[1])
        length = None
        chunked = False
        keep_alive = True
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value.strip())
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and b"close" in value.lower():
                keep_alive = False
        if chunked:
            pieces = []
            while True:
                size = int((await self.reader.readline()).split(b";")[0].strip(), 16)
                if size == 0:
                    await self.reader.readline()  # the blank line after the last chunk
                    break
                pieces.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
            payload = b"".join(pieces)
        elif length is not None:
            payload = await self.reader.readexactly(length)
        else:
            payload = await self.reader.read()
            keep_alive = False
        return Reply(status, payload), keep_alive

    def close(self) -> None:
        self.writer.close()


class RawHttpPool:
    """Connections to one host, reused; at most ``limit`` open at a time."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, limit: int = 256) -> None:
        parsed = urlparse(url)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 80
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._base_headers = f"Host: {self.host}:{self.port}\r\n{extra}"
        self._idle: list[_Connection] = []
        self._gate = asyncio.Semaphore(limit)
        self.stale_retries = 0

    async def _connection(self) -> _Connection:
        if self._idle:
            return self._idle.pop()
        return await self._new_connection()

    async def _new_connection(self) -> _Connection:
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port)
        except OSError as error:
            raise HttpError(f"connect failed: {error}") from None
        return _Connection(reader, writer)

    async def request(
        self, method: str, path: str, body: bytes = b"", content_type: str = "application/json"
    ) -> Reply:
        head = (
            f"{method} {path} HTTP/1.1\r\n{self._base_headers}"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        async with self._gate:
            reused = bool(self._idle)
            try:
                return await self._exchange(await self._connection(), head, body)
            except _StaleConnection:
                if not reused:
                    raise
            # A kept-alive connection the server closed while it sat idle, before any byte of
            # an answer: what HTTP clients (browsers, urllib3) retry once on a new connection.
            # Counted, so a report can say how often it happened. The retry opens a new
            # connection: the other idle ones sat as long and may be closed too.
            self.stale_retries += 1
            return await self._exchange(await self._new_connection(), head, body)

    async def _exchange(self, connection: _Connection, head: bytes, body: bytes) -> Reply:
        try:
            reply, reusable = await connection.exchange(head, body)
        except _StaleConnection:
            connection.close()
            raise
        except (OSError, asyncio.IncompleteReadError, ValueError, HttpError) as error:
            connection.close()
            raise HttpError(f"{type(error).__name__}: {error}") from None
        except BaseException:
            connection.close()  # cancelled mid-exchange: the stream is out of step
            raise
        if reusable:
            self._idle.append(connection)
        else:
            connection.close()
        return reply

    async def post_json(self, path: str, payload: dict) -> Reply:
        return await self.request("POST", path, json.dumps(payload).encode())

    async def close(self) -> None:
        while self._idle:
            self._idle.pop().close()
