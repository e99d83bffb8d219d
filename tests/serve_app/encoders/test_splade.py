import json
from pathlib import Path

import pytest

from serve_app.encoders.base import SparseEncoder
from serve_app.encoders.splade import SpladeEncoder

REFERENCE = json.loads((Path(__file__).parents[2] / "data" / "reference_vectors.json").read_text())


def overlap_cosine(a: dict, b: dict) -> float:
    dot = sum(w * b.get(t, 0.0) for t, w in a.items())
    na = sum(w * w for w in a.values()) ** 0.5
    nb = sum(w * w for w in b.values()) ** 0.5
    return dot / (na * nb)


def test_protocol(splade):
    assert isinstance(splade, SparseEncoder)


def test_matches_reference_weights(splade):
    vectors = splade.encode(REFERENCE["texts"], splade.config.doc_top_k)
    for vector, expected in zip(vectors, REFERENCE["splade_documents"], strict=True):
        assert overlap_cosine(vector.as_term_weights(), expected) >= 0.9999
    query = splade.encode([REFERENCE["query"]], splade.config.query_top_k)[0]
    assert overlap_cosine(query.as_term_weights(), REFERENCE["splade_query"]) >= 0.9999


def test_weights_positive_sorted_and_pruned(splade):
    (vector,) = splade.encode([REFERENCE["texts"][1]], top_k=10)
    assert 0 < len(vector) <= 10
    assert all(v > 0 for v in vector.values)
    assert vector.values == sorted(vector.values, reverse=True)
    assert "mitochondria" in vector.terms or "atp" in vector.terms


def test_padding_does_not_leak_into_weights(splade):
    alone = splade.encode(["cell biology"], 64)[0].as_term_weights()
    batched = splade.encode(["cell biology", "long text about many other things " * 20], 64)[0]
    assert overlap_cosine(alone, batched.as_term_weights()) >= 0.9999
    assert set(alone) == set(batched.as_term_weights())


def test_packed_and_masked_pooling_agree(splade):
    """The CPU projects only real tokens, a GPU zeroes padding's logits: on a batch of uneven
    lengths both give each text's vector alone (no padding)."""
    texts = [REFERENCE["texts"][0], "cell biology", REFERENCE["query"], "atp " * 40]
    alone = [splade.encode([t], 64)[0] for t in texts]
    for pack in (True, False):
        splade._pack_tokens = pack
        try:
            batched = splade.encode(texts, 64)
        finally:
            splade._pack_tokens = True
        for one, many in zip(alone, batched, strict=True):
            assert many.indices == one.indices
            assert many.values == pytest.approx(one.values, abs=1e-5)


def test_min_weight_pruning(local_config):
    strict = SpladeEncoder(local_config.splade.model_copy(update={"min_weight": 1.0}))
    (vector,) = strict.encode([REFERENCE["texts"][1]], 256)
    assert all(v > 1.0 for v in vector.values)


async def test_doc_and_query_modes(splade):
    (doc,) = await splade.encode_documents([REFERENCE["texts"][1]])
    (query,) = await splade.encode_queries([REFERENCE["texts"][1]])
    assert (
        len(query) <= splade.config.query_top_k <= len(doc) or len(doc) < splade.config.query_top_k
    )
    assert await splade.encode_documents([]) == []


@pytest.mark.parametrize("text", ["", "a", "!!!"])
def test_degenerate_inputs(splade, text):
    (vector,) = splade.encode([text], 16)
    assert len(vector.indices) == len(vector.values)
