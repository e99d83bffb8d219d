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
