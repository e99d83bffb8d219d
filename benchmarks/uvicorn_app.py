"""An ASGI app served by uvicorn on 127.0.0.1 and a free port, over a real socket (benchmarks
and tests)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from serve_app.ports import free_port


@asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """``app`` serving until the block ends; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await serving
