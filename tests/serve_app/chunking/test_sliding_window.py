import itertools

import pytest

from serve_app.chunking.sliding_window import SlidingWindowChunker
from serve_app.errors import PayloadTooLargeError
from serve_app.schemas import Document


def test_windows_overlap_by_the_configured_tokens(minilm_counter):
    chunker = SlidingWindowChunker(
        minilm_counter, max_tokens=40, overlap_tokens=10, contextual_header=False
    )
    text = " ".join(f"word{i}" for i in range(200))
    chunks = chunker.chunk(Document(id="d", text=text))
    assert len(chunks) > 3
    budget = 40 - minilm_counter.reserved
    for a, b in itertools.pairwise(chunks):
        assert b.char_start < a.char_end  # overlapping windows
        assert minilm_counter.count([a.text])[0] <= budget


def test_crosses_sections(minilm_counter, plos_article):
    chunker = SlidingWindowChunker(minilm_counter, 128, 16)
    chunks = chunker.chunk(plos_article)
    # Some window starts in one section and runs into the next.
    assert any("\n\n" in c.text for c in chunks)


def test_rejects_overlap_not_below_size(minilm_counter):
    with pytest.raises(ValueError):
        SlidingWindowChunker(minilm_counter, 32, 32)


def test_a_batch_chunks_each_document_as_it_would_alone(minilm_counter, plos_sample):
    chunker = SlidingWindowChunker(minilm_counter, 128, 16)
    documents = [
        *plos_sample,
        Document(id="short", title="T", text="one two three"),
    ]
    batch = chunker.chunk_batch(documents)
    assert [len(chunks) for chunks in batch] == [len(chunker.chunk(d)) for d in documents]
    for document, chunks in zip(documents, batch, strict=True):
        alone = chunker.chunk(document)
        assert [(c.id, c.char_start, c.char_end, c.heading_chain) for c in chunks] == [
            (c.id, c.char_start, c.char_end, c.heading_chain) for c in alone
        ]
    assert len(batch[-1]) == 1


def test_a_header_that_leaves_no_room_names_its_document_in_a_batch(minilm_counter):
    chunker = SlidingWindowChunker(minilm_counter, 40, 8)
    documents = [
        Document(id="fine", title="Short", text="body text " * 50),
        Document(id="too-long-title", title="word " * 60, text="body"),
    ]
    with pytest.raises(PayloadTooLargeError, match="too-long-title") as raised:
        chunker.chunk_batch(documents)
    assert raised.value.status == 413 and "chunker.max_tokens" in str(raised.value)
