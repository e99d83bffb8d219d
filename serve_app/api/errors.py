"""The API's one error table, derived from the exception classes in ``serve_app.errors``.

Each class carries its HTTP status and stable code; the JSON envelope, the OpenAPI error
responses, the mapping of framework errors (unknown route, wrong method, schema mismatch)
and the ``serve_app_errors{code}`` metric label all come from here.
"""

from __future__ import annotations

import contextvars
import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from serve_app.api.models import ErrorEnvelope
from serve_app.api.observability import REQUEST_ID
from serve_app.errors import (
    ConfigError,
    InvalidInputError,
    OverloadedError,
    RequestSchemaError,
    ServeAppError,
    describe_validation_errors,
)

log = logging.getLogger("serve_app.api")

# The code of the error answered for the current request, for the metrics middleware; a box
# (one dict per request) so handlers running in other contexts can still fill it.
ERROR_CODE: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("error_code")


def error_classes() -> list[type[ServeAppError]]:
    """Every API error class, most general first (a class before its subclasses)."""
    found: list[type[ServeAppError]] = []
    pending: list[type[ServeAppError]] = [ServeAppError]
    while pending:
        cls = pending.pop(0)
        if not issubclass(cls, ConfigError):  # start-up errors, never answers to a request
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def table() -> dict[int, list[str]]:
    """HTTP status -> the codes answered with it."""
    out: dict[int, list[str]] = {}
    for cls in error_classes():
        codes = out.setdefault(cls.status, [])
        if cls.code not in codes:
            codes.append(cls.code)
    return dict(sorted(out.items()))


def reported_error(code: str, message: str, retry_after_s: float | None = None) -> ServeAppError:
    """The error an answer's ``error`` event (or body) reports: the class that answers with
    ``code`` (ServeAppError, a 500, for a code no class has), so that an overload is an
    OverloadedError whose answer carries ``Retry-After``."""
    cls = next((c for c in error_classes() if c.code == code), ServeAppError)
    if issubclass(cls, OverloadedError) and retry_after_s is not None:
        return cls(message, retry_after_s)
    return cls(message)


def for_status(status: int) -> type[ServeAppError]:
    """The most general error class answered with ``status`` (framework errors map here)."""
    for cls in error_classes():
        if cls.status == status:
            return cls
    return InvalidInputError if status < 500 else ServeAppError


def openapi_responses() -> dict[int | str, dict[str, Any]]:
    return {
        status: {"model": ErrorEnvelope, "description": " or ".join(codes)}
        for status, codes in table().items()
    }


def error_response(
    error: ServeAppError, headers: dict[str, str] | None = None, status: int | None = None
) -> JSONResponse:
    """The envelope ``{"error": {"code", "message", "request_id"}}`` for ``error``, answered
    with its status (or ``status``, for a framework status no error class has)."""
    box = ERROR_CODE.get(None)
    if box is not None:
        box["code"] = error.code
    body = {"error": {**error.to_dict(), "request_id": REQUEST_ID.get()}}
    if error.public is not None:  # the client is told less: the whole story goes to the log
        log.warning("%s (request %s): %s", error.code, body["error"]["request_id"], error.message)
    status = error.status if status is None else status
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer", **(headers or {})}
    if isinstance(error, OverloadedError):
        headers = {"Retry-After": str(max(1, math.ceil(error.retry_after_s))), **(headers or {})}
    return JSONResponse(body, status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Exception handlers turning every error the framework or the service raises into the
    envelope, each through ``error_response``."""

    @app.exception_handler(ServeAppError)
    async def _app_error(_: Request, error: ServeAppError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(RequestValidationError)
    async def _request_invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        return error_response(RequestSchemaError(describe_validation_errors(error.errors())))

    @app.exception_handler(ValidationError)
    async def _model_invalid(_: Request, error: ValidationError) -> JSONResponse:
        return error_response(RequestSchemaError(describe_validation_errors(error.errors())))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        mapped = for_status(error.status_code)(str(error.detail))
        # A status no class has keeps its own status, with the code of its kind.
        return error_response(mapped, dict(error.headers or {}), status=error.status_code)
