"""The typed client against a newer service: the service's models refuse unknown fields in
requests, but an answer from a later version may carry fields this client does not know, and
the client must keep working (before: every verb raised a ValidationError)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from serve_app.api.app import create_app
from serve_app.api.models import DocumentIn, SearchResponseOut
from serve_app.client import ServiceClient
from serve_app.pipelines.answer_events import AnswerDelta, parse_event
from serve_app.pipelines.components import build_components
from serve_app.schemas import SearchRequest
from serve_app.service import RetrievalService


def with_new_fields(value: Any) -> Any:
    """``value`` with a field no released client knows added to the answer and to every
    object of its lists (results, documents, collections); maps (timings, scores, metadata)
    are left as they are, as a later version would keep their value types."""
    if isinstance(value, dict):
        return {**{k: with_new_fields(v) if isinstance(v, list) else v for k, v in value.items()},
                "added_later": {"x": 1}}  # fmt: skip
    if isinstance(value, list):
        return [with_new_fields(v) for v in value]
    return value


class NewerService(httpx.AsyncBaseTransport):
    """The real service, answering as a later version might."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.raw: dict[str, Any] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        body = await response.aread()
        if not response.headers.get("content-type", "").startswith("application/json"):
            return httpx.Response(response.status_code, headers=response.headers, content=body)
        newer = with_new_fields(json.loads(body))
        self.raw[f"{request.method} {request.url.path}"] = newer
        return httpx.Response(response.status_code, json=newer)


@pytest.fixture(scope="module")
async def newer(app_config_factory):
    components = await build_components(app_config_factory())
    transport = NewerService(httpx.ASGITransport(app=create_app(RetrievalService(components))))
    client = ServiceClient("http://newer", transport=transport)
    yield client, transport
    await client.close()
    await components.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_every_verb_reads_an_answer_with_fields_it_does_not_know(newer):
    client, transport = newer
    assert (await client.create_collection("later")).name == "later"
    assert "later" in [c.name for c in (await client.collections()).collections]
    docs = [DocumentIn(id="d1", title="Plasmids", text="Plasmids carry resistance genes.")]
    assert (await client.ingest(docs, collection="later")).written == ["d1"]
    found = await client.search(SearchRequest(query="plasmids", collection="later"))
    assert [r.doc_id for r in found.results] == ["d1"]
    page = await client.documents("later")
    assert [d.id for d in page.documents] == ["d1"]
    assert (await client.document("d1", "later")).chunk_ids
    assert (await client.delete_document("d1", "later")).deleted == "d1"
    assert (await client.delete_collection("later")).deleted == "later"
    # What made it a newer answer: validated as the service validates, it is refused.
    with pytest.raises(ValidationError, match="added_later"):
        SearchResponseOut.model_validate(transport.raw["POST /v1/collections/later/search"])


def test_an_answer_event_with_a_new_field_is_read():
    event = parse_event("delta", {"text": "Plasmids", "added_later": 1})
    assert isinstance(event, AnswerDelta) and event.text == "Plasmids"
