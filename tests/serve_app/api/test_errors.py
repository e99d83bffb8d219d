"""One error table: a new error class (one file: ``serve_app/errors.py``) is answered with its
status and code, documented in the OpenAPI responses and counted under its code, with no
other change."""

from __future__ import annotations

import gc

import httpx
import pytest
from fastapi import FastAPI

from serve_app.api import errors
from serve_app.api.middleware import RequestEnvelope
from serve_app.api.observability import Metrics
from serve_app.errors import ServeAppError


@pytest.fixture
def teapot():
    class TeapotError(ServeAppError):
        code = "TEAPOT"
        status = 418

    yield TeapotError
    del TeapotError
    gc.collect()  # __subclasses__ holds weak references: the class leaves the table


async def test_a_new_error_class_is_answered_documented_and_counted(teapot):
    assert teapot in errors.error_classes()
    assert errors.table()[418] == ["TEAPOT"]
    assert errors.for_status(418) is teapot

    metrics = Metrics()
    app = FastAPI(responses=errors.openapi_responses())
    errors.install(app)

    @app.get("/brew")
    async def brew() -> None:
        raise teapot("short and stout")

    app.add_middleware(RequestEnvelope, metrics=metrics, set_request_id_header=True)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        response = await http.get("/brew")
        spec = (await http.get("/openapi.json")).json()
    assert response.status_code == 418
    assert response.json()["error"]["code"] == "TEAPOT"
    assert response.json()["error"]["message"] == "short and stout"
    assert "TEAPOT" in spec["paths"]["/brew"]["get"]["responses"]["418"]["description"]
    assert 'serve_app_errors_total{code="TEAPOT"} 1.0' in metrics.render().decode()


def test_every_class_has_its_own_code_per_status():
    for status, codes in errors.table().items():
        assert len(codes) == len(set(codes)), status
    assert errors.table()[413] == ["PAYLOAD_TOO_LARGE"]
    assert "CONFIG_ERROR" not in [c for codes in errors.table().values() for c in codes]


def test_a_note_makes_a_new_error_and_leaves_the_raised_one_as_it_was():
    """An error that crosses a task (a gather, a coalesced batch) may be seen by more than one
    waiter: a note for one must not change what another reports."""
    from serve_app.errors import InvalidInputError, OverloadedError

    raised = InvalidInputError("bad field", param="top_k")
    noted = raised.noted("; nothing was written", {"written": []})
    assert (raised.message, raised.details) == ("bad field", {"param": "top_k"})
    assert noted.message == "bad field; nothing was written" and str(noted) == noted.message
    assert noted.details == {"param": "top_k", "written": []}
    assert type(noted) is InvalidInputError and noted is not raised
    busy = OverloadedError("busy", retry_after_s=7).noted(".")
    assert busy.retry_after_s == 7 and busy.code == "OVERLOADED"
    hidden = ServeAppError("host db-3 refused", public="the store refused").noted(" (retry)")
    assert hidden.client_message() == "the store refused (retry)"
