"""A pathological upload against the local service while it serves searches: does anyone
else notice?

Starts ``serve-app serve`` as `make run` does (``benchmarks.search_during_ingest``'s local
service), indexes ``docs`` SciFact abstracts over HTTP, then sends searches as an open loop at
``rate`` QPS for ``duration_s`` while ``uploads`` multipart uploads of a Markdown file whose
heading line is ``# a``, ``heading_kb`` KB of blanks and ``x#`` go in one after another (the
input that once made a regex loader backtrack for minutes inside the ingress); then stops the
service with SIGINT. Returns each upload's answer and seconds, the searches' summary and how
the service stopped.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from benchmarks.ingest import load_corpus, post_all
from benchmarks.rawhttp import RawHttpPool
from benchmarks.runner import LoadRunner, http_sender, load_queries, search_body, summarise
from benchmarks.search_during_ingest import local_service
from tests.support.data import SCIFACT_DIR

ROOT = Path(__file__).resolve().parents[2]


async def uploads_while_searching(
    url: str, heading_kb: int, uploads: int, rate: float, duration_s: float, docs: int
) -> dict:
    pool = RawHttpPool(url)
    await post_all(pool, load_corpus(SCIFACT_DIR, docs), 50, 1)
    heading = "# a" + " " * (heading_kb * 1000) + "x#"
    payload = f"{heading}\n\nSome text under the heading about bacterial genomes.\n".encode()
    answers: list[dict] = []

    async def upload_loop() -> None:
        await asyncio.sleep(2.0)
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for n in range(uploads):
                started = time.perf_counter()
                files = {"files": (f"heading-{n}.md", payload, "text/markdown")}
                answer = await http.post("/v1/documents", files=files)
                seconds = round(time.perf_counter() - started, 3)
                answers.append({"status": answer.status_code, "seconds": seconds})

    runner = LoadRunner(http_sender(pool), load_queries(SCIFACT_DIR), search_body(), 60)
    started = time.perf_counter()
    try:
        (samples, _), _ = await asyncio.gather(
            runner.open_loop(rate, duration_s, 0.0), upload_loop()
        )
    finally:
        await pool.close()
    return {"uploads": answers, "searches": summarise(samples, time.perf_counter() - started, rate)}


def run(heading_kb: int, uploads: int, rate: float, duration_s: float, docs: int) -> dict:
    config = ROOT / "config" / "local.yaml"
    with local_service(config, [], stop_within=15) as service:
        report = asyncio.run(
            uploads_while_searching(service.url, heading_kb, uploads, rate, duration_s, docs)
        )
    return {**report, "stop": service.stopped}
