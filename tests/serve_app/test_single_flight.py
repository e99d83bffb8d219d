"""``SingleFlight``: callers that come while a run is in flight share it; a caller that
leaves does not cancel it for the others; a failure is shared, not retried per caller; a
finished run is reused only while fresh. And ``/metrics`` on a local run fetches Ray's export
once for a flood of requests (a real exporter counts its hits)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from serve_app.api.observability import METRICS_URL_ENV, Metrics, PrometheusInstruments
from serve_app.single_flight import SingleFlight
from tests.support.uvicorn_server import served

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_callers_share_the_run_in_flight_and_a_leaver_cancels_nothing():
    runs: list[int] = []
    release = asyncio.Event()

    async def work() -> int:
        runs.append(1)
        await release.wait()
        return len(runs)

    flight: SingleFlight[int] = SingleFlight()
    callers = [asyncio.create_task(flight(work)) for _ in range(20)]
    await asyncio.sleep(0.05)
    callers[0].cancel()
    release.set()
    results = await asyncio.gather(*callers[1:])
    assert results == [1] * 19 and len(runs) == 1
    assert await flight(work) == 2  # finished and not fresh: a new run


async def test_a_failure_is_shared_and_a_fresh_result_reused():
    calls: list[int] = []

    async def failing() -> int:
        calls.append(1)
        await asyncio.sleep(0.05)
        raise RuntimeError("down")

    flight: SingleFlight[int] = SingleFlight(fresh_s=60)
    outcomes = await asyncio.gather(*(flight(failing) for _ in range(5)), return_exceptions=True)
    assert all(isinstance(o, RuntimeError) for o in outcomes) and len(calls) == 1
    with pytest.raises(RuntimeError):
        await flight(failing)  # still fresh
    assert len(calls) == 1


class RayLike(PrometheusInstruments):
    def render(self) -> bytes | None:
        return None  # as in a Serve replica: Ray exports the metrics


async def test_a_flood_of_metrics_requests_fetches_rays_export_once(
    monkeypatch, app_config_factory
):
    from serve_app.api.app import create_app
    from serve_app.pipelines.components import build_components
    from serve_app.service import RetrievalService

    hits: list[int] = []

    async def export(request: Request) -> PlainTextResponse:
        hits.append(1)
        await asyncio.sleep(0.2)
        return PlainTextResponse("ray_metric 1\n")

    components = await build_components(app_config_factory(api={"auth": {"mode": "none"}}))
    app = create_app(RetrievalService(components), metrics=Metrics(RayLike()))
    try:
        async with served(Starlette(routes=[Route("/metrics", export)])) as exporter:
            monkeypatch.setenv(METRICS_URL_ENV, f"{exporter}/metrics")
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                answers = await asyncio.gather(*(http.get("/metrics") for _ in range(30)))
    finally:
        await app.state.loaders.close()
        await components.close()
    assert {a.status_code for a in answers} == {200}
    assert all(a.text == "ray_metric 1\n" for a in answers)
    assert len(hits) == 1
