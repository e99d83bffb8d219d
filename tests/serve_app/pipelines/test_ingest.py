import asyncio
import gc
import warnings

import pytest

from serve_app.errors import InvalidInputError, PayloadTooLargeError
from serve_app.pipelines.ingest import IngestPipeline, encoding_text
from serve_app.pipelines.timing import StageTimer
from serve_app.schemas import Chunk, Document, ScopeKey, Section

DEFAULT = ScopeKey("default")


async def test_ingest_then_reingest_is_idempotent(components, corpus):
    pipeline = IngestPipeline(components)
    first = await pipeline.ingest(DEFAULT, corpus)
    assert first.documents == len(corpus) and len(first.written) == len(corpus)
    assert first.chunks_written >= len(corpus)
    count = await components.index.count(DEFAULT)
    assert count == first.chunks_written

    again = await pipeline.ingest(DEFAULT, [d.model_copy(deep=True) for d in corpus])
    assert again.written == [] and sorted(again.unchanged) == sorted(d.id for d in corpus)
    assert not any(k.startswith("encode") for k in again.timings_ms)  # no model work
    assert await components.index.count(DEFAULT) == count


async def test_changed_document_replaces_its_chunks(components, corpus):
    pipeline = IngestPipeline(components)
    await pipeline.ingest(DEFAULT, corpus)
    before = await components.index.count(DEFAULT)
    doc = corpus[0]
    long_text = " ".join([doc.text] * 6)
    grown = await pipeline.ingest(DEFAULT, [doc.model_copy(update={"text": long_text})])
    assert grown.written == [doc.id] and grown.chunks_written > 1
    info = await components.index.document_info(DEFAULT, doc.id)
    assert len(info.chunk_ids) == grown.chunks_written
    shrunk = await pipeline.ingest(DEFAULT, [doc])
    # Chunk ids carry the document's content hash: every chunk of the grown version goes,
    # even those whose text the shrunk one repeats (two versions never share a stored chunk).
    assert shrunk.stale_chunks_removed == grown.chunks_written
    after = await components.index.document_info(DEFAULT, doc.id)
    assert set(after.chunk_ids).isdisjoint(info.chunk_ids)
    assert await components.index.count(DEFAULT) == before


async def test_bad_batch_writes_nothing(components):
    pipeline = IngestPipeline(components)
    limit = components.config.limits.max_document_chars
    good = Document(id="fresh-good", text="A perfectly fine document.")
    huge = Document(id="fresh-huge", text="x" * (limit + 1))
    before = await components.index.count(DEFAULT)
    with pytest.raises(PayloadTooLargeError, match="fresh-huge"):
        await pipeline.ingest(DEFAULT, [good, huge])
    with pytest.raises(InvalidInputError, match="twice"):
        await pipeline.ingest(DEFAULT, [good, good])
    with pytest.raises(InvalidInputError, match="no documents"):
        await pipeline.ingest(DEFAULT, [])
    assert await components.index.count(DEFAULT) == before
    assert await components.index.document_info(DEFAULT, "fresh-good") is None


@pytest.mark.parametrize(
    "fields",
    [
        {"title": "t" * 20_000, "text": "Short body."},
        {"text": "Short body.", "metadata": {"authors": ["a" * 100] * 200}},
        {"text": "Short body.", "source": "s" * 20_000},
        {
            "sections": [
                Section(title="h" * 10_000, children=[Section(title="i" * 10_000, text="Body.")])
            ]
        },
    ],
    ids=["title", "metadata", "source", "heading chain"],
)
async def test_what_every_chunk_repeats_is_bounded_apart_from_the_text(components, fields):
    """A 20 KB title passes the document's character limit, yet each chunk stores it again: a
    request that small could write gigabytes. Refused whole, before any chunk is written."""
    limit = components.config.limits.max_repeated_chars
    document = Document(id="repeats", **fields)
    assert document.char_count() <= components.config.limits.max_document_chars
    assert document.repeated_chars() > limit
    pipeline = IngestPipeline(components)
    before = await components.index.count(DEFAULT)
    with pytest.raises(PayloadTooLargeError, match=r"limits\.max_repeated_chars") as refused:
        await pipeline.ingest(DEFAULT, [Document(id="fine", text="A fine document."), document])
    assert refused.value.status == 413 and "'repeats'" in str(refused.value)
    assert await components.index.count(DEFAULT) == before


async def test_a_document_at_the_repeated_limit_is_written(components):
    limit = components.config.limits.max_repeated_chars
    at_limit = Document(id="at-limit", title="t" * (limit - 2), text="Short body.")
    assert at_limit.repeated_chars() == limit  # the title and "{}", the empty metadata
    result = await IngestPipeline(components).ingest(DEFAULT, [at_limit])
    assert result.written == ["at-limit"]


async def test_tenants_are_separate(components):
    pipeline = IngestPipeline(components)
    a, b = ScopeKey("a"), ScopeKey("b")
    await pipeline.ingest(a, [Document(id="shared-id", text="Tenant A text.")])
    result = await pipeline.ingest(b, [Document(id="shared-id", text="Tenant B text.")])
    assert result.written == ["shared-id"]
    info_a = await components.index.document_info(a, "shared-id")
    info_b = await components.index.document_info(b, "shared-id")
    assert set(info_a.chunk_ids).isdisjoint(info_b.chunk_ids)
    assert await pipeline.delete(a, "shared-id") == 1
    assert await components.index.document_info(b, "shared-id") is not None


async def test_sectioned_document_keeps_provenance(components):
    doc = Document(
        id="sectioned",
        title="A Study",
        sections=[
            Section(title="Methods", text="We measured things."),
            Section(title="Results", text="It rose."),
        ],
        metadata={"year": 2021},
    )
    await IngestPipeline(components).ingest(DEFAULT, [doc])
    info = await components.index.document_info(DEFAULT, "sectioned")
    assert info.metadata["year"] == 2021 and len(info.chunk_ids) == 2


def test_encoding_text_prepends_the_contextual_header():
    chunk = Chunk(
        id="c",
        doc_id="d",
        text="body",
        title="Title",
        heading_chain=["Methods", "Assay"],
        order=0,
        char_start=0,
        char_end=4,
    )
    assert encoding_text(chunk, True) == "Title\nMethods > Assay\nbody"
    assert encoding_text(chunk, False) == "body"


async def test_an_encode_cancelled_before_its_calls_start_leaves_no_coroutine_behind(components):
    """A client that hangs up as encoding begins: the gather is cancelled before its tasks first
    run. Each encoder call must then not exist yet, rather than exist and never be awaited."""
    chunks = [
        Chunk(id="c", doc_id="d", text="bacterial genomes", order=0, char_start=0, char_end=17)
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        encode = asyncio.ensure_future(IngestPipeline(components)._encode(chunks, StageTimer()))
        await asyncio.sleep(0)  # _encode has reached its gather; the gather's tasks wait to start
        encode.cancel()
        with pytest.raises(asyncio.CancelledError):
            await encode
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]
