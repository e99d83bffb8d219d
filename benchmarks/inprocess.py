"""The in-process search pipeline as a load target, beside the HTTP one (load.http_sender)."""

from __future__ import annotations

from benchmarks.load import Sample, Send
from serve_app.errors import ServeAppError
from serve_app.pipelines.search import SearchPipeline
from serve_app.schemas import SearchRequest


def pipeline_sender(pipeline: SearchPipeline, tenant_id: str) -> Send:
    """Each payload (a SearchRequest body) searched by ``pipeline`` in this process."""

    async def send(payload: dict) -> Sample:
        try:
            response = await pipeline.search(SearchRequest.model_validate(payload), tenant_id)
        except ServeAppError as error:
            return Sample(0.0, error.status, error.code)
        return Sample(0.0, 200, "OK", response.timings_ms)

    return send
