import pytest

from serve_app.chunking.imrad import ImradChunker
from serve_app.chunking.sections import SectionChunker
from serve_app.chunking.sliding_window import SlidingWindowChunker
from serve_app.loaders import load_file


@pytest.fixture(scope="session")
def chunkers(minilm_counter, sentence_splitter):
    return {
        "sliding_window": SlidingWindowChunker(minilm_counter, 128, 16),
        "sections": SectionChunker(minilm_counter, sentence_splitter, 128, 16),
        "imrad": ImradChunker(minilm_counter, sentence_splitter, 128, 0),
    }


@pytest.fixture(scope="session")
def plos_article(plos_dir):
    return load_file(plos_dir / "journal.pcbi.1004082.xml")


@pytest.fixture(scope="session")
def plos_sample(plos_dir):
    return [load_file(p) for p in sorted(plos_dir.glob("*.xml"))[::10]]
