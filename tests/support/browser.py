"""Debian's Chromium driven by Playwright for Python (no browser download: the system
binary), for the tests that meet the API as a browser does."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"


@asynccontextmanager
async def chromium(*args: str) -> AsyncIterator[Any]:
    """A launched Chromium (``args``: extra command-line switches), closed at the end."""
    from playwright.async_api import async_playwright

    assert shutil.which("chromium") or Path(CHROMIUM).exists(), (
        "Debian's chromium is missing: scripts/setup.sh --dev installs it as root "
        "(apt-get install -y chromium)"
    )
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", *args]
        )
        try:
            yield launched
        finally:
            await launched.close()


@dataclass
class OpenedPage:
    """A page opened by ``playground``: its first response, and every request it made and
    every script error it raised since."""

    page: Any
    response: Any = None
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@contextmanager
def playground(url: str) -> Iterator[OpenedPage]:
    """The playground page at ``url`` in a launched Chromium (Playwright's sync API, for the
    tests that drive a real run from a plain test function); the browser closed at the end."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            opened = OpenedPage(browser.new_page())
            opened.page.on("request", lambda r: opened.requests.append(r.url))
            opened.page.on("pageerror", lambda e: opened.errors.append(str(e)))
            opened.response = opened.page.goto(f"{url}/")
            assert opened.response is not None and opened.response.status == 200
            yield opened
        finally:
            browser.close()
