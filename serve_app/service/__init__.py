"""The application service: every use case (ingest, get, delete, search, answer, collections,
inspect, readiness) once, called by every door (the HTTP routers, the in-process CLI, the Ray
ingress; the ``--url`` client and the MCP server reach it through the HTTP API)."""

from serve_app.service.retrieval import (
    BatchObserver,
    Readiness,
    ReadinessCheck,
    RetrievalService,
)

__all__ = ["BatchObserver", "Readiness", "ReadinessCheck", "RetrievalService"]
