"""Health, readiness and metrics (unauthenticated; nothing here reveals internals)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from serve_app.api import deps
from serve_app.api.models import ReadyResponse
from serve_app.api.observability import Metrics
from serve_app.api.service import RetrievalService
from serve_app.errors import NotFoundError

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=ReadyResponse, responses={503: {"model": ReadyResponse}})
async def readyz(service: RetrievalService = Depends(deps.service)) -> JSONResponse:
    """Each check's name and state (``ok``, ``failing`` or ``timeout``); the reasons are in
    the server log only."""
    checks = await service.readiness()
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)


@router.get("/metrics", response_class=Response)
async def metrics_endpoint(metrics: Metrics = Depends(deps.metrics)) -> Response:
    text = metrics.render()
    if text is None:
        raise NotFoundError(
            "this service exports its metrics through Ray: scrape the metrics port (8080) of "
            "every Ray node (the chart's PodMonitor does), not this endpoint"
        )
    return Response(text, media_type="text/plain; version=0.0.4")
