import numpy as np
import pytest

from serve_app.chunking.imrad import ImradChunker, imrad_label
from serve_app.schemas import Document, Section


@pytest.mark.parametrize(
    "title,label",
    [
        ("Introduction", "Introduction"),
        ("Background", "Introduction"),
        ("Materials and Methods", "Methods"),
        ("Material and Methods", "Methods"),
        ("2. Methods", "Methods"),
        ("Results", "Results"),
        ("Results and Discussion", "Results and Discussion"),
        ("Conclusions", "Discussion"),
        ("Abstract", "Abstract"),
        ("Supporting Information", None),
    ],
)
def test_labels(title, label):
    assert imrad_label(title) == label


def test_labels_and_boundaries_on_plos(chunkers, plos_article):
    chunks = chunkers["imrad"].chunk(plos_article)
    labels = {c.metadata["imrad"] for c in chunks}
    assert {"Abstract", "Introduction", "Methods", "Results", "Discussion"} <= labels
    for chunk in chunks:
        assert imrad_label(chunk.section) in (chunk.metadata["imrad"], None)


def test_subsections_flow_together_within_a_section(minilm_counter, sentence_splitter):
    doc = Document(
        id="d",
        sections=[
            Section(
                title="Methods",
                children=[
                    Section(title="Cells", text="We grew cells."),
                    Section(title="Assay", text="We ran assays."),
                ],
            ),
            Section(title="Results", text="It worked."),
        ],
    )
    chunks = ImradChunker(minilm_counter, sentence_splitter, 64).chunk(doc)
    assert [c.metadata["imrad"] for c in chunks] == ["Methods", "Results"]
    assert chunks[0].text == "We grew cells.\n\nWe ran assays."


def test_semantic_breakpoints_split_at_the_least_similar_pair(minilm_counter, sentence_splitter):
    topic_a = [f"Cats purr softly number {i}." for i in range(5)]
    topic_b = [f"Stocks fell sharply number {i}." for i in range(5)]
    doc = Document(id="d", sections=[Section(title="Results", text=" ".join(topic_a + topic_b))])

    def embed(texts):
        rows = np.array([[1.0, 0.0] if "Cats" in t else [0.0, 1.0] for t in texts])
        return rows

    plain = ImradChunker(minilm_counter, sentence_splitter, 250, contextual_header=False).chunk(doc)
    split = ImradChunker(
        minilm_counter,
        sentence_splitter,
        250,
        contextual_header=False,
        embedder=embed,
        threshold_percentile=50,
    ).chunk(doc)
    assert len(plain) == 1
    assert [c.text.split()[0] for c in split] == ["Cats", "Stocks"]


def test_plos_chunk_counts_per_chunker(sample_chunks, plos_sample):
    counts = {name: sum(map(len, chunked)) for name, chunked in sample_chunks.items()}
    assert all(n >= len(plos_sample) for n in counts.values())
