"""Contracts every chunker keeps, parametrised over all of them on real PLOS articles."""

import pytest

from serve_app.chunking.base import canonical_text, contextual_header, stored_chunk_id
from serve_app.schemas import Document, ScopeKey

NAMES = ["sliding_window", "sections", "imrad"]


@pytest.mark.parametrize("name", NAMES)
class TestChunkerContract:
    def test_deterministic_ids_and_text(self, chunkers, article_chunks, plos_article, name):
        first = article_chunks[name]
        second = chunkers[name].chunk(plos_article.model_copy(deep=True))
        assert [c.id for c in first] == [c.id for c in second]
        assert len({c.id for c in first}) == len(first)

    def test_provenance_offsets_point_into_canonical_text(self, article_chunks, plos_article, name):
        canonical, _ = canonical_text(plos_article)
        for chunk in article_chunks[name]:
            assert canonical[chunk.char_start : chunk.char_end] == chunk.text
            assert chunk.doc_id == plos_article.id and chunk.title == plos_article.title
            assert chunk.metadata["doi"] == plos_article.id
            assert chunk.source == plos_article.source

    def test_orders_are_consecutive(self, article_chunks, name):
        chunks = article_chunks[name]
        assert [c.order for c in chunks] == list(range(len(chunks)))

    def test_no_chunk_over_the_token_budget(
        self, chunkers, minilm_counter, plos_sample, sample_chunks, name
    ):
        chunker = chunkers[name]
        for doc, chunks in zip(plos_sample, sample_chunks[name], strict=True):
            texts = [f"{contextual_header(c.title, c.heading_chain)}\n{c.text}" for c in chunks]
            counts = minilm_counter.count(texts)
            assert max(counts) + minilm_counter.reserved <= chunker.max_tokens, doc.id

    def test_covers_the_text(self, article_chunks, plos_article, name):
        canonical, _ = canonical_text(plos_article)
        covered = bytearray(len(canonical))
        for chunk in article_chunks[name]:
            covered[chunk.char_start : chunk.char_end] = b"\x01" * (
                chunk.char_end - chunk.char_start
            )
        uncovered = [canonical[i] for i in range(len(canonical)) if not covered[i]]
        assert all(ch.isspace() for ch in uncovered)

    def test_short_text_document(self, chunkers, name):
        doc = Document(id="tiny", title="T", text="One short sentence.")
        (chunk,) = chunkers[name].chunk(doc)
        assert chunk.text == "One short sentence." and chunk.char_start == 0

    def test_the_scope_changes_stored_ids(self, chunkers, name):
        (chunk,) = chunkers[name].chunk(Document(id="d", text="Same text."))
        stored = {
            stored_chunk_id(key, chunk.id, "h")
            for key in (ScopeKey("a"), ScopeKey("b"), ScopeKey("a", "papers"))
        }
        assert len(stored) == 3

    def test_fingerprint_is_serialisable(self, chunkers, name):
        import json

        fingerprint = chunkers[name].fingerprint()
        assert json.loads(json.dumps(fingerprint)) == fingerprint
        assert fingerprint["chunker"] == name
