"""Request dependencies: the service and loaders from app state, the authenticated principal,
and deadlines. All async: a sync dependency would hop to the threadpool on every request."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar, cast

from fastapi import Depends, Header, Path, Request
from starlette.requests import ClientDisconnect
from starlette.types import Receive

from serve_app.api.auth import Principal
from serve_app.api.observability import Metrics
from serve_app.errors import TimeoutExceededError, UnauthenticatedError
from serve_app.loaders.pool import LoaderPool
from serve_app.schemas import (
    COLLECTION_MAX_LENGTH,
    COLLECTION_PATTERN,
    DEFAULT_COLLECTION,
    ScopeKey,
)
from serve_app.service import RetrievalService
from serve_app.service.tenant_limits import TenantRates

T = TypeVar("T")

COLLECTION_NAME = Path(min_length=1, max_length=COLLECTION_MAX_LENGTH, pattern=COLLECTION_PATTERN)


async def default_collection() -> None:
    """The routes without a collection: the tenant's ``default`` one."""
    return None


async def named_collection(name: str = COLLECTION_NAME) -> str:
    """The routes under ``/v1/collections/{name}``."""
    return name


async def service(request: Request) -> RetrievalService:
    return cast(RetrievalService, request.app.state.service)


async def metrics(request: Request) -> Metrics:
    return cast(Metrics, request.app.state.metrics)


async def loaders(request: Request) -> LoaderPool:
    return cast(LoaderPool, request.app.state.loaders)


async def tenant_rates(request: Request) -> TenantRates:
    return cast(TenantRates, request.app.state.tenant_rates)


async def principal(request: Request) -> Principal:
    """The principal the authentication middleware put on the request."""
    found = request.scope.get("state", {}).get("principal")
    if found is None:  # only if a route escaped the middleware's prefixes
        raise UnauthenticatedError("missing credentials")
    return cast(Principal, found)


def _bounded(configured: float, header: int | None) -> float:
    return configured if header is None else min(configured, header / 1000)


async def deadline_s(
    request: Request, x_request_timeout_ms: int | None = Header(default=None, ge=1)
) -> float:
    """Seconds a search, read or delete may take: ``api.request_timeout_s``, or less."""
    return _bounded(request.app.state.service.config.api.request_timeout_s, x_request_timeout_ms)


async def answer_deadline_s(
    request: Request, x_request_timeout_ms: int | None = Header(default=None, ge=1)
) -> float:
    """Seconds an answer may take: ``answer.deadlines.total_s``, or less."""
    return _bounded(request.app.state.service.config.answer.deadlines.total_s, x_request_timeout_ms)


async def ingest_deadline_s(
    request: Request, x_request_timeout_ms: int | None = Header(default=None, ge=1)
) -> float:
    """Seconds an upload may take: ``api.ingest_timeout_s``, or less."""
    return _bounded(request.app.state.service.config.api.ingest_timeout_s, x_request_timeout_ms)


def scope_key(
    collection: Callable[..., Any], needs: Literal["read", "write"]
) -> Callable[..., Awaitable[ScopeKey]]:
    """A dependency resolving the request's ``ScopeKey`` once: the credential's tenant (which
    must hold ``needs``), the collection ``collection`` names (None: ``default``), and its
    existence (``RetrievalService.existing``, within the request's deadline)."""

    async def resolve(
        request: Request,
        name: str | None = Depends(collection),
        who: Principal = Depends(principal),
        seconds: float = Depends(deadline_s),
    ) -> ScopeKey:
        who.require(needs)
        service: RetrievalService = request.app.state.service
        return await within(seconds, service.existing(who.scope(name or DEFAULT_COLLECTION)))

    return resolve


async def client_left(receive: Receive) -> None:
    """Returns when the client hangs up (once the body is read, ``receive`` has nothing
    else to say)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(receive: Receive, work: Awaitable[T]) -> T:
    """``work``, cancelled when its client hangs up first: ``ClientDisconnect`` then (the
    envelope's 499). Before a response's first byte nothing else notices a hang-up: uvicorn
    and Serve's proxy tell the app only through ``receive``, which nobody reads while an
    answer is prepared, so the generation would run on for nobody."""
    working = asyncio.ensure_future(work)
    watching = asyncio.ensure_future(client_left(receive))
    try:
        await asyncio.wait({working, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watching.cancel()
        working.cancel()  # a no-op once it is done
        await asyncio.gather(working, watching, return_exceptions=True)
    if working.cancelled():
        raise ClientDisconnect()
    return working.result()


async def within(seconds: float, work: Awaitable[T]) -> T:
    try:
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation (a client
        # that left) arriving as the work finishes.
        async with asyncio.timeout(seconds):
            return await work
    except TimeoutError:
        raise TimeoutExceededError(f"the request did not finish within {seconds:g}s") from None
