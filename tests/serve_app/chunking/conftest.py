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
def article_chunks(chunkers, plos_article):
    """Each chunker's chunks of ``plos_article``, chunked once for the tests that only read
    them (the determinism test chunks it again itself)."""
    return {name: chunker.chunk(plos_article) for name, chunker in chunkers.items()}


@pytest.fixture(scope="session")
def plos_sample(plos_dir):
    """Seven articles spread over the 122 (every journal, short and long)."""
    return [load_file(p) for p in sorted(plos_dir.glob("*.xml"))[::20]]


@pytest.fixture(scope="session")
def sample_chunks(chunkers, plos_sample):
    """name -> each sample article's chunks, chunked once for the tests that read them."""
    return {name: [c.chunk(doc) for doc in plos_sample] for name, c in chunkers.items()}
