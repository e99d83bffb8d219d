"""The playground page at ``/``: static files shipped in the package (no CDN, no build step, no
network at run time), under a Content-Security-Policy that lets the page run only its own
script and talk only to its own origin, so a stored document or a model's answer cannot run
script or send anything elsewhere (an outside image is an exfiltration channel too)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from starlette.types import Scope

STATIC = Path(__file__).parent / "static"

PLAYGROUND_CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
ASSET_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
PAGE_HEADERS = {
    **ASSET_HEADERS,
    "Content-Security-Policy": PLAYGROUND_CSP,
    "Referrer-Policy": "no-referrer",
}


class _Assets(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(ASSET_HEADERS)
        return response


def add_playground(app: FastAPI) -> None:
    """``/`` (the page) and ``/playground/`` (its script and style sheet). The page's links
    are relative, so it works below a route prefix too."""
    page = (STATIC / "playground.html").read_bytes()

    @app.get("/", include_in_schema=False)
    async def playground() -> Response:
        return Response(page, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)

    app.mount("/playground", _Assets(directory=STATIC / "playground"), name="playground")
