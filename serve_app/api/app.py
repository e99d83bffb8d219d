"""The FastAPI application: documents, search, health, readiness and metrics.

Every response carries ``X-Request-ID``; every error is ``{"error": {"code", "message",
"request_id"}}`` with a stable code; no stack trace ever reaches a client.
"""

from __future__ import annotations

import asyncio
import json
import logging

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from serve_app import __version__
from serve_app.api.auth import Authenticator, Principal
from serve_app.api.models import (
    DeleteResponse,
    ErrorEnvelope,
    IngestRequest,
    IngestResponse,
    ReadyResponse,
    SearchHit,
    SearchResponseOut,
)
from serve_app.api.observability import REQUEST_ID, Metrics, Stopwatch, request_id_from
from serve_app.api.service import RetrievalService
from serve_app.errors import (
    InvalidInputError,
    PayloadTooLargeError,
    ServeAppError,
    TimeoutExceededError,
    describe_validation_errors,
)
from serve_app.loaders import load_bytes
from serve_app.schemas import (
    FUSION_METHODS,
    Document,
    DocumentInfo,
    FusionSpec,
    SearchRequest,
    SearchResponse,
)

log = logging.getLogger("serve_app.api")
ACCESS = logging.getLogger("serve_app.access")

_HTTP_CODES = {401: "UNAUTHENTICATED", 403: "FORBIDDEN", 404: "NOT_FOUND", 413: "PAYLOAD_TOO_LARGE"}
ERROR_RESPONSES: dict = {
    status: {"model": ErrorEnvelope, "description": code}
    for status, code in {
        400: "INVALID_INPUT",
        401: "UNAUTHENTICATED",
        403: "FORBIDDEN",
        404: "NOT_FOUND",
        413: "PAYLOAD_TOO_LARGE",
        422: "INVALID_INPUT",
        503: "SERVICE_UNAVAILABLE",
        504: "TIMEOUT",
    }.items()
}


def error_response(status: int, code: str, message: str) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "request_id": REQUEST_ID.get()}}
    return JSONResponse(body, status_code=status)


def create_app(
    service: RetrievalService, metrics: Metrics | None = None, set_request_id_header: bool = True
) -> FastAPI:
    """The API over ``service``. Behind Ray Serve, the proxy already assigns the request id
    (honouring the client's ``X-Request-ID``), passes it in and writes the response header,
    so ``set_request_id_header`` is off there to avoid a second copy."""
    config = service.config
    metrics = metrics or Metrics()
    authenticator = Authenticator(config.api.auth)
    app = FastAPI(
        title="serve-app hybrid retrieval API",
        version=__version__,
        responses=ERROR_RESPONSES,
    )
    app.state.metrics = metrics
    app.state.service = service

    # -- errors --------------------------------------------------------------------------
    @app.exception_handler(ServeAppError)
    async def _app_error(_: Request, error: ServeAppError) -> JSONResponse:
        return error_response(error.status, error.code, error.message)

    @app.exception_handler(RequestValidationError)
    async def _request_invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        return error_response(
            422, "INVALID_INPUT", describe_validation_errors(list(error.errors()))
        )

    @app.exception_handler(ValidationError)
    async def _model_invalid(_: Request, error: ValidationError) -> JSONResponse:
        return error_response(422, "INVALID_INPUT", describe_validation_errors(error.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(error.status_code, "INVALID_INPUT")
        return error_response(error.status_code, code, str(error.detail))

    # -- request id, access log, metrics, body limit, last-resort error envelope -------------
    @app.middleware("http")
    async def _envelope(request: Request, call_next):  # type: ignore[no-untyped-def]
        request_id = request_id_from(request.headers.get("x-request-id"))
        token = REQUEST_ID.set(request_id)
        watch = Stopwatch()
        try:
            length = request.headers.get("content-length")
            if length and length.isdigit() and int(length) > config.api.max_request_bytes:
                response = error_response(
                    413,
                    "PAYLOAD_TOO_LARGE",
                    f"request body of {length} bytes is over the limit of "
                    f"{config.api.max_request_bytes} (api.max_request_bytes)",
                )
            else:
                try:
                    response = await call_next(request)
                except Exception:
                    log.exception("unhandled error")
                    response = error_response(500, "INTERNAL", "internal error; see the server log")
            if set_request_id_header:
                response.headers["X-Request-ID"] = request_id
            route = request.scope.get("route")
            endpoint = getattr(route, "path", "unmatched")
            metrics.observe_request(endpoint, request.method, response.status_code, watch.seconds())
            if response.status_code >= 400:
                metrics.errors.labels(_code_for(response)).inc()
            ACCESS.info(
                "request",
                extra={
                    "method": request.method,
                    "path": request.url.path,
                    "status": response.status_code,
                    "duration_ms": round(watch.seconds() * 1000, 2),
                },
            )
            return response
        finally:
            REQUEST_ID.reset(token)

    # -- dependencies ----------------------------------------------------------------------
    def principal(
        authorization: str | None = Header(default=None),
        x_api_key: str | None = Header(default=None),
    ) -> Principal:
        return authenticator.authenticate(authorization, x_api_key)

    def deadline_s(x_request_timeout_ms: int | None = Header(default=None, ge=1)) -> float:
        configured = config.api.request_timeout_s
        return (
            configured
            if x_request_timeout_ms is None
            else min(configured, x_request_timeout_ms / 1000)
        )

    def ingest_deadline_s(x_request_timeout_ms: int | None = Header(default=None, ge=1)) -> float:
        configured = config.api.ingest_timeout_s
        return (
            configured
            if x_request_timeout_ms is None
            else min(configured, x_request_timeout_ms / 1000)
        )

    async def within(seconds: float, work):  # type: ignore[no-untyped-def]
        try:
            return await asyncio.wait_for(work, seconds)
        except TimeoutError:
            raise TimeoutExceededError(f"the request did not finish within {seconds:g}s") from None

    # -- documents -------------------------------------------------------------------------
    @app.post(
        "/v1/documents",
        response_model=IngestResponse,
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/IngestRequest"}},
                    "multipart/form-data": {
                        "schema": {
                            "type": "object",
                            "properties": {
                                "files": {
                                    "type": "array",
                                    "items": {"type": "string", "format": "binary"},
                                }
                            },
                            "required": ["files"],
                        }
                    },
                },
            }
        },
    )
    async def ingest_documents(
        request: Request,
        who: Principal = Depends(principal),
        seconds: float = Depends(ingest_deadline_s),
    ) -> IngestResponse:
        who.require("write")
        documents = await _read_documents(request, who.tenant_id, config.limits.max_document_chars)
        result = await within(seconds, service.ingest(documents))
        metrics.observe_stages("ingest", result.timings_ms)
        return IngestResponse.model_validate(result.model_dump())

    @app.get("/v1/documents/{doc_id:path}", response_model=DocumentInfo)
    async def get_document(doc_id: str, who: Principal = Depends(principal)) -> DocumentInfo:
        who.require("read")
        return await service.get_document(who.tenant_id, doc_id)

    @app.delete("/v1/documents/{doc_id:path}", response_model=DeleteResponse)
    async def delete_document(doc_id: str, who: Principal = Depends(principal)) -> DeleteResponse:
        who.require("write")
        removed = await service.delete_document(who.tenant_id, doc_id)
        return DeleteResponse(deleted=doc_id, chunks_removed=removed)

    # -- search ----------------------------------------------------------------------------
    async def run_search(
        request: SearchRequest, who: Principal, seconds: float
    ) -> SearchResponseOut:
        who.require("read")
        response: SearchResponse = await within(seconds, service.search(request, who.tenant_id))
        metrics.observe_stages("search", response.timings_ms)
        return SearchResponseOut(
            query=response.query,
            results=[SearchHit.from_scored(r) for r in response.results],
            fusion=response.fusion,
            reranked=response.reranked,
            strategies=response.strategies,
            total=response.total,
            timings_ms=response.timings_ms,
        )

    @app.post("/v1/search", response_model=SearchResponseOut)
    async def search_post(
        body: SearchRequest,
        who: Principal = Depends(principal),
        seconds: float = Depends(deadline_s),
    ) -> SearchResponseOut:
        return await run_search(body, who, seconds)

    @app.get("/v1/search", response_model=SearchResponseOut)
    async def search_get(
        q: str = Query(min_length=1, max_length=4096),
        top_k: int = Query(default=10, ge=1, le=200),
        strategies: str | None = Query(
            default=None, pattern=r"^(bm25|splade|dense)(,(bm25|splade|dense))*$"
        ),
        fusion: str | None = Query(default=None, pattern="^(" + "|".join(FUSION_METHODS) + ")$"),
        rerank: bool | None = None,
        who: Principal = Depends(principal),
        seconds: float = Depends(deadline_s),
    ) -> SearchResponseOut:
        request = SearchRequest.model_validate(
            {
                "query": q,
                "top_k": top_k,
                "strategies": strategies.split(",") if strategies else None,
                "fusion": FusionSpec(method=fusion).model_dump() if fusion else None,
                "rerank": rerank,
            }
        )
        return await run_search(request, who, seconds)

    # -- operations ------------------------------------------------------------------------
    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", response_model=ReadyResponse, responses={503: {"model": ReadyResponse}})
    async def readyz() -> JSONResponse:
        checks = await service.readiness()
        ready = all(v == "ok" for v in checks.values())
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    @app.get("/metrics", response_class=Response)
    async def metrics_endpoint() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    return app


def _code_for(response: Response) -> str:
    try:
        return json.loads(bytes(response.body))["error"]["code"]  # type: ignore[attr-defined]
    except Exception:
        return {401: "UNAUTHENTICATED", 403: "FORBIDDEN", 404: "NOT_FOUND"}.get(
            response.status_code, "OTHER"
        )


async def _read_documents(request: Request, tenant_id: str, max_chars: int) -> list[Document]:
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await request.form()
        files = [f for f in form.getlist("files") if hasattr(f, "read")]
        if not files:
            raise InvalidInputError("multipart upload needs one or more 'files' parts")
        documents = []
        for upload in files:
            data = await upload.read()
            documents.append(
                load_bytes(
                    data, upload.filename or "upload", tenant_id=tenant_id, max_chars=max_chars
                )
            )
        return documents
    if content_type and not content_type.startswith("application/json"):
        raise InvalidInputError(
            f"unsupported content type {content_type!r}; send JSON or multipart"
        )
    body = await request.body()
    try:
        parsed = IngestRequest.model_validate_json(body)
    except ValidationError as error:
        raise InvalidInputError(describe_validation_errors(error.errors())) from None
    try:
        return [
            Document.model_validate({**d.model_dump(exclude_none=True), "tenant_id": tenant_id})
            for d in parsed.documents
        ]
    except ValidationError as error:
        raise InvalidInputError(describe_validation_errors(error.errors())) from None
    except ValueError as error:  # pragma: no cover - defensive
        raise PayloadTooLargeError(str(error)) from None
