"""The playground page: what it weighs and how soon a browser draws it.

    python -m benchmarks playground [--config config/local.yaml] [--loads 20] [--docs 30]
                                    [--screenshots docs/images] [--question TEXT]

Serves the API in process (uvicorn on a free 127.0.0.1 port, the configuration's models and
stores in a fresh data directory, SciFact abstracts indexed), then loads ``/`` in Debian's
Chromium ``--loads`` times, each in a fresh browser context (an empty cache): the bytes of
every file the page fetches (raw and gzip-compressed), first contentful paint, DOM ready,
and the time from a search's submit to its results drawn. With ``--screenshots DIR`` it
also saves the search and answer views (the answer from the configured LLM) as PNGs.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.ingest import load_corpus
from benchmarks.report import default_stem, table, write_report
from benchmarks.service import (
    TENANT,
    add_run_arguments,
    app_config,
    config_data,
    fresh_workdir,
    local_run,
)
from benchmarks.uvicorn_app import served

CHROMIUM = "/usr/bin/chromium"
QUERY = "vitamin D deficiency and bone density"
QUESTION = "What did the studies find about vitamin D?"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("--docs", type=int, default=30)
    parser.add_argument("--screenshots", type=Path, help="save the search and answer views here")
    parser.add_argument("--question", default=QUESTION)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 1)


async def one_load(browser: Any, url: str) -> dict[str, Any]:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    sizes: dict[str, int] = {}

    async def body(response: Any) -> None:
        if response.request.resource_type in ("document", "script", "stylesheet", "image"):
            sizes[response.url.removeprefix(url)] = len(await response.body())

    page.on("response", lambda r: asyncio.ensure_future(body(r)))
    await page.goto(f"{url}/", wait_until="load")
    paint = await page.evaluate(
        "() => new Promise(done => new PerformanceObserver((list, observer) => {"
        " observer.disconnect(); done(list.getEntries()[0].startTime); })"
        ".observe({type: 'paint', buffered: true}))"
    )
    ready = await page.evaluate(
        "() => performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd"
    )
    await page.fill("#query", QUERY)
    started = time.perf_counter()
    await page.click("#search-form button[type=submit]")
    await page.wait_for_selector("#results > li .breakdown")
    searched = (time.perf_counter() - started) * 1000
    await context.close()
    return {"fcp_ms": paint, "dom_ready_ms": ready, "search_drawn_ms": searched, "sizes": sizes}


async def screenshots(browser: Any, url: str, folder: Path, question: str) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    context = await browser.new_context(viewport={"width": 1280, "height": 1000})
    page = await context.new_page()
    await page.goto(f"{url}/")
    await page.fill("#query", QUERY)
    await page.click("#search-form button[type=submit]")
    await page.wait_for_selector("#results > li .breakdown")
    saved = [folder / "playground-search.png"]
    # The first hit's breakdown in view: the results, not the form, are what the page is for.
    await page.evaluate(
        "() => document.querySelector('#search-message').scrollIntoView({block: 'start'})"
    )
    await page.screenshot(path=str(saved[0]))
    await page.fill("#question", question)
    await page.click("#answer-form button[type=submit]")
    await page.wait_for_function(
        "() => document.querySelector('#answer-message').textContent.startsWith('done')",
        timeout=600_000,
    )
    cite = page.locator("#answer a.cite").first
    if await cite.count():
        await cite.click()
    await page.locator("#answer-title").scroll_into_view_if_needed()
    saved.append(folder / "playground-answer.png")
    await page.screenshot(path=str(saved[1]))
    await context.close()
    return [str(p) for p in saved]


async def measure(args: argparse.Namespace) -> dict[str, Any]:

    from serve_app.cli.common import retrieval_service

    data = local_run(config_data(args.config), fresh_workdir("playground"))
    with_llm = bool(args.screenshots)  # the page's load and search need none
    async with retrieval_service(app_config(data), with_llm=with_llm) as service:
        return await measure_served(args, service)


async def measure_served(args: argparse.Namespace, service: Any) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    from serve_app.api.app import create_app
    from serve_app.schemas import ScopeKey

    documents = load_corpus(args.corpus, args.docs)
    await service.ingest(ScopeKey(TENANT), documents)
    application = create_app(service, host="127.0.0.1")
    report: dict[str, Any] = {"loads": args.loads, "docs": len(documents)}
    async with served(application) as url, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        await one_load(browser, url)  # warm the server's first-request paths
        loads = [await one_load(browser, url) for _ in range(args.loads)]
        if args.screenshots:
            report["screenshots"] = await screenshots(browser, url, args.screenshots, args.question)
        await browser.close()
    await application.state.loaders.close()
    sizes = loads[-1]["sizes"]
    files = {path: (path or "/") for path in sizes}
    report["bytes"] = {files[p]: n for p, n in sorted(sizes.items())}
    report["bytes_total"] = sum(sizes.values())
    report["gzip_bytes_total"] = sum(
        len(gzip.compress(path.read_bytes()))
        for path in Path(__file__).resolve().parents[1].glob("serve_app/api/static/**/*.*")
    )
    for key in ("fcp_ms", "dom_ready_ms", "search_drawn_ms"):
        values = [load[key] for load in loads]
        report[key] = {
            "median": round(statistics.median(values), 1),
            "p95": percentile(values, 0.95),
        }
    return report


def run(args: argparse.Namespace) -> int:
    report = asyncio.run(measure(args))
    rows = [
        (key, report[key]["median"], report[key]["p95"])
        for key in ("fcp_ms", "dom_ready_ms", "search_drawn_ms")
    ]
    write_report(args.out or default_stem("playground"), report, [
        "# The playground page: weight and first render",
        "",
        f"- {report['loads']} loads of / in Chromium, each in a fresh context (empty cache), "
        f"over 127.0.0.1; {report['docs']} SciFact abstracts indexed",
        f"- bytes fetched: {report['bytes_total']:,} ({report['gzip_bytes_total']:,} gzipped)",
        "",
        *table(["file", "bytes"], report["bytes"].items()),
        "",
        *table(["measure", "median ms", "p95 ms"], rows),
    ])  # fmt: skip
    print(f"page bytes {report['bytes_total']:,}; first paint median {rows[0][1]} ms, "
          f"p95 {rows[0][2]} ms; search drawn median {rows[2][1]} ms")  # fmt: skip
    return 0
