import itertools

from serve_app.chunking.base import canonical_text
from serve_app.chunking.sections import SectionChunker
from serve_app.schemas import Document, Section


def test_never_crosses_a_section_boundary(chunkers, plos_article):
    _, blocks = canonical_text(plos_article)
    for chunk in chunkers["sections"].chunk(plos_article):
        inside = [b for b in blocks if b.start <= chunk.char_start and chunk.char_end <= b.end]
        assert inside, f"chunk {chunk.order} spans two sections"
        assert tuple(chunk.heading_chain) == inside[0].chain


def test_small_sections_are_one_chunk_each(minilm_counter, sentence_splitter):
    doc = Document(
        id="d",
        title="T",
        sections=[Section(title="A", text="Alpha is short."), Section(title="B", text="Beta too.")],
    )
    chunks = SectionChunker(minilm_counter, sentence_splitter, 64, 8).chunk(doc)
    assert [(c.section, c.text) for c in chunks] == [("A", "Alpha is short."), ("B", "Beta too.")]


def test_long_section_splits_on_sentence_boundaries(minilm_counter, sentence_splitter):
    sentences = [f"Sentence number {i} talks about protein folding kinetics." for i in range(40)]
    doc = Document(id="d", sections=[Section(title="Results", text=" ".join(sentences))])
    chunks = SectionChunker(
        minilm_counter, sentence_splitter, 64, 0, contextual_header=False
    ).chunk(doc)
    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.text.startswith("Sentence number") and chunk.text.endswith(".")


def test_overlap_repeats_trailing_sentences(minilm_counter, sentence_splitter):
    sentences = [f"Fact {i} is stated here plainly." for i in range(30)]
    doc = Document(id="d", text=" ".join(sentences))
    chunks = SectionChunker(
        minilm_counter, sentence_splitter, 64, 20, contextual_header=False
    ).chunk(doc)
    assert any(b.char_start < a.char_end for a, b in itertools.pairwise(chunks))
