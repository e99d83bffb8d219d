"""The launcher's folder ingest waits out a 429's ``Retry-After`` (a tenant's uploaded-text
rate, ``api.tenants.ingest_bytes_per_minute``) and sends the batch again, instead of
reporting the files failed; a real server answers the 429 first."""

from __future__ import annotations

import asyncio
import threading

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from deployments.local.launcher import ingest_folder
from tests.support.uvicorn_server import served

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_429_is_waited_out_and_the_batch_sent_again(tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "b.txt").write_text("beta")
    seen: list[int] = []

    async def documents(request: Request) -> JSONResponse:
        form = await request.form()
        seen.append(len(form.getlist("files")))
        if len(seen) == 1:
            refusal = {"error": {"code": "TENANT_LIMIT", "message": "past its rate"}}
            return JSONResponse(refusal, status_code=429, headers={"Retry-After": "1"})
        names = [f.filename for f in form.getlist("files")]
        return JSONResponse({
            "documents": len(names), "chunks_written": 2, "written": names, "unchanged": [],
            "stale_chunks_removed": 0, "timings_ms": {},
        })  # fmt: skip

    app = Starlette(routes=[Route("/v1/documents", documents, methods=["POST"])])
    async with served(app) as url:
        totals = await asyncio.to_thread(
            ingest_folder, url, [str(tmp_path)], 4, 30, threading.Event()
        )
    assert seen == [2, 2]
    assert totals["written"] == 2 and totals["failed_files"] == 0, totals
