"""``make run`` from a clone alone: its command (read from the Makefile with ``make -n``)
serves the PLOS starter articles of the ``allofplos`` package, and an article is found by a
search while later ones are still being indexed (real local Ray Serve app on CPU)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from lxml import etree

from serve_app.ports import free_port
from tests.support.data import starter_corpus
from tests.support.local_run import ROOT, Output

pytestmark = pytest.mark.slow


def make_run_command(ingest: Path, port: int) -> list[str]:
    """The serve command ``make run`` would run (its set-up step left out)."""
    printed = subprocess.run(
        ["make", "-n", "run", f"INGEST={ingest}", f"PORT={port}"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    line = next(x for x in printed.splitlines() if "serve-app" in x and " serve " in x)
    return shlex.split(line)


def test_make_run_serves_the_starter_articles_as_they_arrive(tmp_path):
    # Three uploads of four files: the four shortest articles first (found soon), then five
    # of middling length, which keep the service indexing meanwhile; bounded on two cores.
    by_size = sorted(starter_corpus().glob("*.xml"), key=lambda p: (p.stat().st_size, p.name))
    articles = by_size[:4] + by_size[40:45]
    folder = tmp_path / "articles"
    folder.mkdir()
    for article in articles:
        shutil.copy(article, folder)
    port = free_port()
    command = make_run_command(folder, port)
    assert command[-2:] == ["--ingest", str(folder)] and "config/local.yaml" in command
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SERVE_APP_"))}
    env.update(
        PYTHONUNBUFFERED="1",
        SERVE_APP__DATA_DIR=str(tmp_path / "data"),
        SERVE_APP_TEST_DATA=str(tmp_path / "no-shared-folder"),
    )
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    output = Output(process)
    try:
        output.wait_for("serving on", 240)
        first = articles[0].stem  # e.g. journal.pbio.0020334: the doc id ends with it
        title = " ".join(etree.parse(articles[0]).findtext(".//article-title", "").split())
        deadline = time.monotonic() + 600
        found_while_indexing = None
        while time.monotonic() < deadline:
            answer = httpx.get(
                f"http://127.0.0.1:{port}/v1/search", params={"q": title, "top_k": 5}, timeout=30
            )
            if answer.status_code == 200 and any(
                r["doc_id"].endswith(first) for r in answer.json()["results"]
            ):
                found_while_indexing = not any("ingested 9 files" in x for x in output.lines)
                break
            time.sleep(1)
        assert found_while_indexing is True, "\n".join(output.lines[-30:])
        output.wait_for("ingested 9 files", 600)
        page_url = next(x for x in output.lines if "in a browser" in x).split()[1]
        assert page_url == f"http://127.0.0.1:{port}/"
        search_and_upload_from_the_page(page_url, title, first)
    finally:
        process.send_signal(2)
        process.wait(60)


def search_and_upload_from_the_page(url: str, title: str, doc_suffix: str) -> None:
    """What a new user does in the playground of the run `make run` printed: a search shows
    the article with each strategy's rank and share; an upload is written and found; a
    collection is created, filled, listed, searched and deleted."""
    from playwright.sync_api import sync_playwright

    from tests.support.browser import CHROMIUM

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(url)
        page.wait_for_function(
            "() => document.querySelector('#readiness').textContent.startsWith('ready')"
        )
        page.fill("#query", title)
        page.click("#search-form button[type=submit]")
        first = page.locator("#results > li").first
        first.locator(".breakdown").wait_for()
        assert doc_suffix in first.locator(".where").inner_text()
        assert first.locator(".breakdown tbody tr").count() == 3
        assert all(first.locator(".breakdown .rank").all_inner_texts())
        page.set_input_files("#files", files=[{
            "name": "field-notes.txt", "mimeType": "text/plain",
            "buffer": b"Axolotls regrow whole limbs, spinal cord and parts of the heart.",
        }])  # fmt: skip
        row = page.locator("#uploads li").first
        page.wait_for_function(
            "() => document.querySelector('#uploads li').dataset.outcome", timeout=120_000
        )
        assert row.get_attribute("data-outcome") == "written"
        assert row.locator("progress").get_attribute("value") == "100"
        page.fill("#query", "axolotls regrow limbs")
        page.click("#search-form button[type=submit]")  # resets the message before it awaits
        page.wait_for_function(
            "() => document.querySelector('#search-message').className.includes('ok')"
        )
        assert "field-notes" in page.locator("#results > li .where").first.inner_text()
        a_collection_is_created_filled_listed_searched_and_deleted(page)
        assert all(r.startswith(url) for r in requests), requests
        browser.close()


def a_collection_is_created_filled_listed_searched_and_deleted(page) -> None:
    """Three files into a new collection (one refused, with its reason), its document list,
    a search in it, and its delete, through the Ray Serve run's page."""
    page.fill("#new-collection", "lab-notes")
    page.click("#create-collection button[type=submit]")
    page.wait_for_function("() => document.querySelector('#collection').value === 'lab-notes'")
    page.set_input_files("#files", files=[
        {"name": "otters.txt", "mimeType": "text/plain",
         "buffer": b"Sea otters use rocks as tools to open shellfish."},
        {"name": "ravens.md", "mimeType": "text/markdown",
         "buffer": b"# Ravens\n\nRavens plan ahead and barter for food."},
        {"name": "empty.txt", "mimeType": "text/plain", "buffer": b""},
    ])  # fmt: skip
    page.wait_for_function(
        "() => [...document.querySelectorAll('#uploads li')].filter(li => li.dataset.outcome)"
        ".length === 4",
        timeout=120_000,
    )
    rows = page.locator("#uploads li")
    outcomes = {
        rows.nth(i).locator(".name").inner_text(): rows.nth(i).get_attribute("data-outcome")
        for i in range(1, 4)
    }
    assert outcomes == {"otters.txt": "written", "ravens.md": "written", "empty.txt": "refused"}
    assert "refused: 400" in rows.filter(has_text="empty.txt").locator(".result").inner_text()
    page.wait_for_function("() => document.querySelectorAll('#documents tbody tr').length === 2")
    assert sorted(page.locator("#documents td.mono").all_inner_texts()) == ["otters", "ravens"]
    page.fill("#query", "otters rocks tools")
    page.click("#search-form button[type=submit]")
    page.wait_for_function(
        "() => document.querySelector('#search-message').className.includes('ok')"
    )
    assert "otters" in page.locator("#results > li .where").first.inner_text()
    page.click("#delete-collection")
    page.wait_for_function("() => document.querySelector('#collection').value === ''")
    assert "deleted lab-notes" in page.locator("#collection-message").inner_text()
