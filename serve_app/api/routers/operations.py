"""Health, readiness and metrics (unauthenticated; nothing here reveals internals)."""

from __future__ import annotations

import os

import httpx
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from serve_app.api import deps
from serve_app.api.models import ReadyResponse
from serve_app.api.observability import INSTANCE_ENV, METRICS_URL_ENV, Metrics
from serve_app.errors import NotFoundError, ServiceUnavailableError
from serve_app.service import RetrievalService
from serve_app.single_flight import SingleFlight

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=ReadyResponse, responses={503: {"model": ReadyResponse}})
async def readyz(service: RetrievalService = Depends(deps.service)) -> JSONResponse:
    """Each check's name and state (``ok``, ``failing`` or ``timeout``); the reasons are in
    the server log only. The LLM's check is reported but does not gate readiness."""
    state = await service.readiness()
    body = ReadyResponse(
        ready=state.ready, checks=state.checks, instance=os.environ.get(INSTANCE_ENV)
    )
    return JSONResponse(body.model_dump(), status_code=200 if state.ready else 503)


@router.get("/metrics", response_class=Response)
async def metrics_endpoint(request: Request, metrics: Metrics = Depends(deps.metrics)) -> Response:
    """The service's metrics: its own registry in process; on Ray Serve, a local run's Ray
    metrics export (fetched from it); in a cluster, where to scrape them instead."""
    text = metrics.render()
    if text is not None:
        return Response(text, media_type="text/plain; version=0.0.4")
    exported = os.environ.get(METRICS_URL_ENV)
    if not exported:
        raise NotFoundError(
            "this service exports its metrics through Ray: scrape the metrics port (8080) of "
            "every Ray node (the chart's PodMonitor does), not this endpoint"
        )
    # Fetched at most once a second per app and address, whatever the number of /metrics
    # requests (unauthenticated: a flood of them was a fetch each).
    flights = request.app.state.__dict__.setdefault("metrics_exports", {})
    flight: SingleFlight[tuple[bytes, str]] = flights.setdefault(exported, SingleFlight(1.0))
    content, media_type = await flight(lambda: _fetch(exported))
    return Response(content, media_type=media_type)


async def _fetch(exported: str) -> tuple[bytes, str]:
    try:
        async with httpx.AsyncClient(timeout=5.0) as client:
            answer = await client.get(exported)
            answer.raise_for_status()
    except httpx.HTTPError as error:
        raise ServiceUnavailableError(
            f"this run's metrics are exported at {exported}, which did not answer: {error}"
        ) from None
    return answer.content, answer.headers.get("content-type", "text/plain")
