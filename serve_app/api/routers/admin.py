"""``/v1/admin``: operator views across tenants; every route needs the ``admin`` scope."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from serve_app.api import deps
from serve_app.api.auth import Principal
from serve_app.errors import RequestSchemaError
from serve_app.schemas import COLLECTION_PATTERN, TENANT_PATTERN, ScopeKey
from serve_app.service import RetrievalService

router = APIRouter(prefix="/v1/admin")


@router.get("/inspect")
async def inspect(
    tenant: str | None = Query(default=None, max_length=128, pattern=TENANT_PATTERN),
    collection: str | None = Query(default=None, max_length=64, pattern=COLLECTION_PATTERN),
    who: Principal = Depends(deps.principal),
    seconds: float = Depends(deps.deadline_s),
    service: RetrievalService = Depends(deps.service),
) -> dict[str, Any]:
    """Per store: its own report (alias and versions, model binding, payload indexes, a
    payload sample, size on disk where reported); per (tenant, collection): the chunks and
    documents each store holds. ``collection`` needs ``tenant`` (else 422 INVALID_INPUT: an
    operator names whose collection to inspect, never their own tenant by default)."""
    who.require("admin")
    if collection is not None and tenant is None:
        raise RequestSchemaError("collection: inspecting a collection needs its tenant")
    selector = None if tenant is None else ScopeKey(tenant, collection)
    return await deps.within(seconds, service.inspect(selector))
