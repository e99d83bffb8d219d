"""Debian's Chromium driven by Playwright for Python (no browser download: the system
binary), for the tests that meet the API as a browser does."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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
