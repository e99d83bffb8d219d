import pytest

from serve_app.config import Bm25Config
from serve_app.encoders.base import SparseEncoder
from serve_app.encoders.bm25 import Bm25Encoder


def test_protocol_and_query_weights():
    encoder = Bm25Encoder(Bm25Config())
    assert isinstance(encoder, SparseEncoder)
    (query,) = encoder.encode_queries_sync(["The running dogs"])
    assert query.values == [1.0] * len(query.values)
    assert len(query) == 2  # stop word dropped, "running" and "dogs" stemmed


def test_stemming_matches_inflections():
    encoder = Bm25Encoder(Bm25Config())
    (doc,) = encoder.encode_documents_sync(["dogs running"])
    (query,) = encoder.encode_queries_sync(["dog runs"])
    assert set(doc.indices) == set(query.indices)


def test_term_frequency_saturation_and_length_normalisation():
    encoder = Bm25Encoder(Bm25Config(k1=1.2, b=0.75, avg_len=10))
    (once,) = encoder.encode_documents_sync(["protein"])
    (thrice,) = encoder.encode_documents_sync(["protein protein protein"])
    assert thrice.values[0] > once.values[0]
    assert thrice.values[0] < 3 * once.values[0]
    (long_doc,) = encoder.encode_documents_sync(["protein " + "other words here " * 20])
    protein = once.indices[0]
    assert dict(zip(long_doc.indices, long_doc.values, strict=True))[protein] < once.values[0]


def test_model_id_names_parameters():
    assert "k1=0.9" in Bm25Encoder(Bm25Config(k1=0.9)).model_id


def test_title_weight_counts_the_header_that_many_times():
    from serve_app.encoders.bm25 import bm25_model_id, bm25_weights, term_counts
    from serve_app.pipelines.ingest import bm25_text, encoding_text
    from serve_app.schemas import Chunk

    body = "Protein folding rates depend on contact order."
    chunk = Chunk(
        id="c", doc_id="d", text=body, title="Protein folding", order=0, char_start=0, char_end=1
    )
    assert bm25_text(chunk, True, 1) == encoding_text(chunk, True)
    assert bm25_text(chunk, False, 3) == body  # no header indexed, nothing to weigh
    config = Bm25Config(k1=1.2, b=0.75, avg_len=20, title_weight=3)
    (vector,) = Bm25Encoder(config).encode_documents_sync([bm25_text(chunk, True, 3)])
    counts: dict[int, float] = dict(term_counts(body))
    for term, count in term_counts("Protein folding").items():
        counts[term] = counts.get(term, 0) + 3 * count
    assert dict(zip(vector.indices, vector.values, strict=True)) == pytest.approx(
        bm25_weights(counts, 1.2, 0.75, 20)
    )
    # An index built with another title weight holds other vectors: the model guard sees it.
    assert bm25_model_id(config) != bm25_model_id(Bm25Config(k1=1.2, b=0.75, avg_len=20))
