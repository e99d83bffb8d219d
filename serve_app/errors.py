"""One exception hierarchy; each error carries the stable API code and HTTP status it maps to.

This is the API's error table: ``serve_app.api.errors`` derives the HTTP responses, the
OpenAPI error responses and the metric labels from these classes, so a new error is one
class here."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any, Self


class ServeAppError(Exception):
    """Base of every error the library raises on purpose."""

    code: str = "INTERNAL"
    status: int = 500

    def __init__(
        self, message: str, public: str | None = None, details: dict | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details  # structured facts for the client (error.details)
        # What a client is told instead of ``message`` where that carries a backend's own
        # words (its hostnames, paths, driver text): those go to the server log only.
        self.public = public

    def noted(self, note: str, details: dict | None = None) -> Self:
        """A new error of this kind with ``note`` after the message (and after what a client
        is told) and ``details`` added: what the failure did or did not leave behind. This
        one is left as it was raised (errors are created, never changed in flight)."""
        new = copy.copy(self)
        new.message = f"{self.message}{note}"
        new.args = (new.message,)
        if self.public is not None:
            new.public = f"{self.public}{note}"
        if details:
            new.details = {**(self.details or {}), **details}
        return new

    def client_message(self) -> str:
        return self.message if self.public is None else self.public

    def to_dict(self) -> dict:
        out: dict = {"code": self.code, "message": self.client_message()}
        if self.details is not None:
            out["details"] = self.details
        return out


class InvalidInputError(ServeAppError):
    """The request or a document is invalid (bad field, empty query, unknown strategy);
    ``param``, where one field is at fault, goes to ``details.param``."""

    code = "INVALID_INPUT"
    status = 400

    def __init__(self, message: str, param: str | None = None, details: dict | None = None) -> None:
        super().__init__(message, details={**(details or {}), "param": param} if param else details)


class RequestSchemaError(InvalidInputError):
    """A request that does not match the API's schema (a field's type, range or presence)."""

    status = 422


class PromptTooLongError(InvalidInputError):
    """The answer's prompt and ``max_tokens`` do not fit the model's context window."""

    code = "PROMPT_TOO_LONG"
    status = 422


class UnsupportedParameterError(InvalidInputError):
    """A request field the service understands but cannot honour (OpenAI's ``tools``, an
    image part); ``details.param`` names it."""

    code = "UNSUPPORTED_PARAMETER"


class InvalidHeaderError(InvalidInputError):
    """A request header whose value is not text (not UTF-8, or with control characters)."""

    code = "INVALID_HEADER"


class InvalidHostError(InvalidInputError):
    """A ``Host`` the service does not answer to (``api.allowed_hosts``; on a loopback bind
    only the loopback names): a web page that rebinds its own name to 127.0.0.1."""

    code = "INVALID_HOST"


class UnsupportedFormatError(InvalidInputError):
    """A file whose format no loader handles."""


class MalformedDocumentError(InvalidInputError):
    """A file of a supported format that cannot be parsed."""


class PayloadTooLargeError(ServeAppError):
    """A document or request over a configured size limit."""

    code = "PAYLOAD_TOO_LARGE"
    status = 413


class RequestTooSlowError(ServeAppError):
    """A request body that stalled or arrived below the floor rate (``api.connections``):
    answered 408 and the connection closed."""

    code = "REQUEST_TIMEOUT"
    status = 408


class UnauthenticatedError(ServeAppError):
    """Missing or invalid credentials."""

    code = "UNAUTHENTICATED"
    status = 401


class ForbiddenError(ServeAppError):
    """Valid credentials without the scope the operation needs."""

    code = "FORBIDDEN"
    status = 403


class TenantQuotaError(ForbiddenError):
    """A tenant at a quota that time does not lift (``api.tenants.max_collections``): 403
    until it frees some of what it holds."""

    code = "TENANT_QUOTA"


class CrossOriginError(ForbiddenError):
    """A request a web page of another origin sent (its ``Origin``, or ``Sec-Fetch-Site``
    on a write), not one of ``api.allowed_origins``."""

    code = "CROSS_ORIGIN"


class NotFoundError(ServeAppError):
    code = "NOT_FOUND"
    status = 404


def collection_not_found(name: str) -> NotFoundError:
    return NotFoundError(
        f"collection {name!r} not found; create it with POST /v1/collections (or "
        f"serve-app collections create {name})"
    )


class MethodNotAllowedError(ServeAppError):
    code = "METHOD_NOT_ALLOWED"
    status = 405


class ConflictError(ServeAppError):
    """The request conflicts with the index state (e.g. a different embedding model)."""

    code = "CONFLICT"
    status = 409


class ModelMismatchError(ConflictError):
    """Ingest or search with a model other than the one the index was built with (its id,
    revision or dimension), or a model cache holding another revision than configured."""

    code = "STORE_MODEL_MISMATCH"


class IndexInUseError(ConflictError):
    """An embedded index that another process holds (``stores.ownership``)."""

    code = "INDEX_IN_USE"


class ServiceUnavailableError(ServeAppError):
    code = "SERVICE_UNAVAILABLE"
    status = 503


class StoreUnavailableError(ServiceUnavailableError):
    """A store that cannot serve or write right now (its engine refused, its server is
    unreachable); readiness reports the store failing until it works again."""

    code = "STORE_UNAVAILABLE"


class OverloadedError(ServeAppError):
    """Every generation slot is taken and the wait queue is full: answered 429 with a
    ``Retry-After`` header (``retry_after_s``), never queued without bound."""

    code = "OVERLOADED"
    status = 429

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TenantLimitError(OverloadedError):
    """One tenant at its own limit (``api.tenants``): 429 with ``Retry-After``, the other
    tenants unaffected."""

    code = "TENANT_LIMIT"


class TimeoutExceededError(ServeAppError):
    code = "TIMEOUT"
    status = 504


class ConfigError(ServeAppError):
    """Invalid configuration; raised at start, naming the offending field."""

    code = "CONFIG_ERROR"
    status = 500


class MissingExtraError(ConfigError):
    """A command whose optional dependencies (an extra of the package) are not installed;
    refused at start, naming the extra to install."""

    code = "MISSING_EXTRA"


def describe_validation_errors(errors: Iterable[Mapping[str, Any]]) -> str:
    """One line per pydantic error: ``field.path: message (got 'value')``."""
    parts = []
    for error in errors:
        field = ".".join(str(p) for p in error.get("loc", ())) or "request"
        value = error.get("input")
        got = f" (got {value!r})" if isinstance(value, str | int | float | bool) else ""
        parts.append(f"{field}: {error['msg']}{got}")
    return "; ".join(parts)
