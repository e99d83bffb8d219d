"""A failed upload's answer is its outcome: once the error is answered, nothing more of the
request is written; the error names the documents its finished sub-batches wrote, and those
stay whole (in-process service, real small models and the embedded store; the dense model's
outage is one failing call of the real encoder)."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.errors import ServiceUnavailableError
from serve_app.pipelines.components import build_components
from serve_app.schemas import Document, ScopeKey
from serve_app.service import RetrievalService

pytestmark = pytest.mark.asyncio(loop_scope="session")


class OneCallFails:
    """The real dense encoder, except that its ``failing``-th document call raises the error a
    lost model replica gives (and takes a moment, as a dying replica does)."""

    def __init__(self, encoder: object, failing: int) -> None:
        self._encoder = encoder
        self._failing = failing
        self.calls = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._encoder, name)

    async def embed_documents(self, texts: list[str]):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == self._failing:
            await asyncio.sleep(0.3)
            raise ServiceUnavailableError("the dense model replica died")
        return await self._encoder.embed_documents(texts)


async def test_nothing_is_written_after_a_failed_upload_is_answered(app_config_factory):
    config = app_config_factory(api={"ingest_batch_size": 1, "ingest_concurrency": 2})
    components = await build_components(config)
    try:
        components.dense = OneCallFails(components.dense, failing=3)
        service = RetrievalService(components)
        documents = [
            Document(id=f"doc-{i}", text=f"Plasmid {i} carries resistance genes {i}.")
            for i in range(12)
        ]
        with pytest.raises(ServiceUnavailableError) as raised:
            await service.ingest(ScopeKey("default"), documents)
        error = raised.value
        written = error.details["written"]
        assert len(written) < len(documents)
        assert f"{len(written)} documents of this request were written" in error.message

        async def present() -> set[str]:
            found = set()
            for document in documents:
                if (
                    await components.index.document_info(ScopeKey("default"), document.id)
                    is not None
                ):
                    found.add(document.id)
            return found

        assert await present() == set(written)
        await asyncio.sleep(3)  # sub-batches left running would write meanwhile
        assert await present() == set(written)
        for doc_id in written:  # each one whole: every chunk of its version present
            info = await components.index.document_info(ScopeKey("default"), doc_id)
            assert info is not None and len(info.chunk_ids) >= 1
    finally:
        await components.close()
