"""The FastAPI application: routers for documents, search and operations, over one service.

Every response carries ``X-Request-ID``; every error is ``{"error": {"code", "message",
"request_id"}}`` with a stable code from the one error table (``serve_app.api.errors``); no
stack trace ever reaches a client. Credentials are checked and body bytes counted in ASGI
middleware, before any route parses a body.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from pydantic import TypeAdapter

from serve_app import __version__
from serve_app.api import deps, errors
from serve_app.api.auth import Authenticator
from serve_app.api.browser import BrowserRules
from serve_app.api.edge import Edge
from serve_app.api.middleware import Authenticate, BrowserGuard, RequestEnvelope
from serve_app.api.models import IngestRequest
from serve_app.api.observability import Metrics
from serve_app.api.playground import add_playground
from serve_app.api.replays import Replays
from serve_app.api.routers import (
    admin,
    answer,
    collections,
    documents,
    openai_compat,
    operations,
    search,
)
from serve_app.loaders.pool import LoaderPool
from serve_app.pipelines.answer_events import AnswerEvent
from serve_app.service import RetrievalService
from serve_app.service.tenant_limits import TenantRates


def loader_pool(service: RetrievalService) -> LoaderPool:
    limits = service.config.limits
    return LoaderPool(
        workers=limits.loader_workers,
        timeout_s=limits.loader_timeout_s,
        max_file_bytes=limits.max_file_bytes,
        max_chars=limits.max_document_chars,
        max_pages=limits.max_pdf_pages,
        max_memory_bytes=limits.loader_max_memory_bytes,
    )


def create_app(
    service: RetrievalService,
    metrics: Metrics | None = None,
    set_request_id_header: bool = True,
    loaders: LoaderPool | None = None,
    host: str | None = None,
) -> FastAPI:
    """The API over ``service``. Behind Ray Serve, the proxy already assigns the request id
    (honouring the client's ``X-Request-ID``), passes it in and writes the response header,
    so ``set_request_id_header`` is off there to avoid a second copy. ``host`` is the address
    the API is bound to, for the exposure check (``auth.check_exposure``)."""
    config = service.config
    authenticator = Authenticator(config.api.auth, host=host)
    pool = loaders or loader_pool(service)

    @asynccontextmanager
    async def lifespan(_: FastAPI):  # type: ignore[no-untyped-def]
        yield
        await pool.close()

    app = FastAPI(
        title="serve-app hybrid retrieval API",
        version=__version__,
        responses=errors.openapi_responses(),
        lifespan=lifespan,
        docs_url=None,  # FastAPI's pages load Swagger UI from a CDN: served from here instead
        redoc_url=None,
    )
    _offline_docs(app)
    add_playground(app)
    app.state.service = service
    app.state.metrics = metrics or Metrics()
    app.state.loaders = pool
    app.state.replays = Replays(service.config.answer.resume_s)
    app.state.tenant_rates = TenantRates(config.api.tenants)
    errors.install(app)
    default = APIRouter(prefix="/v1")  # the tenant's default collection
    documents.add_document_routes(default, deps.default_collection)
    search.add_search_routes(default, deps.default_collection)
    answer.add_answer_routes(default, deps.default_collection)
    openai_compat.add_openai_routes(default, deps.default_collection)
    routers = (default, collections.router, collections.named_router, admin.router)
    for router in (*routers, operations.router):
        app.include_router(router)
    _hand_added_schemas(app)
    # Added innermost first: the edge (which caps each route's body bytes) wraps the
    # envelope, which wraps the browser rules and authentication, in that order.
    app.add_middleware(Authenticate, authenticator=authenticator, rates=app.state.tenant_rates)
    rules = BrowserRules(config.api.allowed_hosts, config.api.allowed_origins, host)
    app.add_middleware(BrowserGuard, rules=rules)
    app.add_middleware(
        RequestEnvelope, metrics=app.state.metrics, set_request_id_header=set_request_id_header
    )
    app.add_middleware(Edge, api=config.api)
    return app


def _offline_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI from the ``swagger-ui-bundle`` package, so the page works with no
    network (a local run, an air-gapped cluster)."""
    import swagger_ui_bundle

    app.mount(
        "/docs/assets", StaticFiles(directory=swagger_ui_bundle.swagger_ui_path), name="docs-assets"
    )

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}/docs/assets/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/docs/assets/swagger-ui.css",
            swagger_favicon_url=f"{root}/docs/assets/favicon-32x32.png",
        )


def _sse_event_schema(events: dict[str, Any]) -> dict[str, Any]:
    """One event of the answer's stream as OpenAPI models a ``text/event-stream`` item (and
    schemathesis checks it): the ``event`` name, an ``id``, and the ``data`` string whose
    JSON is the ``AnswerEvent`` body of that name (``contentSchema``)."""
    return {
        "title": "AnswerStreamEvent",
        "oneOf": [
            {
                "type": "object",
                "required": ["event", "data"],
                "properties": {
                    "event": {"const": name},
                    "id": {"type": "string"},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": {"$ref": ref},
                    },
                },
            }
            for name, ref in events["discriminator"]["mapping"].items()
        ],
    }


def _openai_errors(paths: dict[str, Any]) -> None:
    """The OpenAI routes answer errors in OpenAI's shape: their error responses (the app's
    table, the same on every route) name that envelope instead of ours. Here, at schema
    time, so that both doors of the route publish the same table."""
    ours, theirs = "#/components/schemas/ErrorEnvelope", "#/components/schemas/OpenAIErrorEnvelope"
    for path, methods in paths.items():
        if not path.endswith("/chat/completions"):
            continue
        for operation in methods.values():
            for response in operation.get("responses", {}).values():
                body = response.get("content", {}).get("application/json", {})
                if body.get("schema") == {"$ref": ours}:
                    body["schema"] = {"$ref": theirs}


def _hand_added_schemas(app: FastAPI) -> None:
    """Schemas no route declares as its body or response model, added to the OpenAPI
    components by hand: the upload's (it reads its body itself, after authentication) and
    the answer's events (the SSE response's ``data:`` bodies, and the stream's items)."""
    build = app.openapi
    added: dict[str, Any] = {
        "IngestRequest": IngestRequest,
        "AnswerEvent": AnswerEvent,
        "OpenAIErrorEnvelope": openai_compat.OpenAIErrorEnvelope,
    }

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = build()
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, shape in added.items():
            definitions = TypeAdapter(shape).json_schema(
                ref_template="#/components/schemas/{model}", mode="validation"
            )
            for inner, definition in definitions.pop("$defs", {}).items():
                components.setdefault(inner, definition)
            components.setdefault(name, definitions)
        components.setdefault("AnswerStreamEvent", _sse_event_schema(components["AnswerEvent"]))
        _openai_errors(schema["paths"])
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
