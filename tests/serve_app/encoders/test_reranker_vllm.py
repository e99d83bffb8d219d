"""The vllm reranker (llm.score) against the transformers cross-encoder on a tiny random
Qwen3ForSequenceClassification with the real Qwen3 tokenizer."""

import numpy as np
import pytest

from serve_app.config import RerankerConfig
from tests.conftest import require_vllm

pytestmark = pytest.mark.vllm
require_vllm()

QUERY = "what makes ATP in cells"
PASSAGES = [
    "Mitochondria produce ATP through oxidative phosphorylation.",
    "Stock markets fell sharply on Monday.",
    "x",
    "ATP synthase is an enzyme in the inner membrane.",
    "The weather was mild for the season, with light rain in the north. " * 3,
    "Glycolysis yields two ATP per glucose.",
]


def config(model_dir, backend: str) -> RerankerConfig:
    return RerankerConfig(
        enabled=True,
        backend=backend,
        model=str(model_dir),
        max_length=128,
        batch_size=4,
        vllm={"enforce_eager": True},
    )


@pytest.fixture(scope="module")
def vllm_reranker(tiny_qwen3_classifier_dir):
    from serve_app.encoders.reranker_vllm import VllmReranker

    reranker = VllmReranker(config(tiny_qwen3_classifier_dir, "vllm"))
    yield reranker
    reranker.close()


@pytest.fixture(scope="module")
def reference(tiny_qwen3_classifier_dir):
    from serve_app.encoders.reranker import CrossEncoderReranker

    return CrossEncoderReranker(config(tiny_qwen3_classifier_dir, "transformers"))


async def test_ranks_identically_to_transformers(vllm_reranker, reference):
    served = await vllm_reranker.score(QUERY, PASSAGES)
    expected = reference.score_sync(QUERY, PASSAGES)
    assert all(0 < s < 1 for s in served)
    assert list(np.argsort(served)[::-1]) == list(np.argsort(expected)[::-1])
    assert served == pytest.approx(expected, abs=1e-4)  # both are sigmoid(logit)
    assert len(set(np.round(served, 6))) == len(PASSAGES)  # a ranking, not a tie


def test_pairs_from_many_queries_and_empty(vllm_reranker, reference):
    queries = [QUERY, "stock prices", QUERY]
    passages = PASSAGES[:3]
    scores, stats = vllm_reranker.score_pairs(queries, passages)
    assert scores == pytest.approx(reference.score_pairs(queries, passages)[0], abs=1e-4)
    assert stats["batch_size"] == 3
    assert vllm_reranker.score_sync(QUERY, []) == []


def test_long_pairs_are_truncated_to_max_length(vllm_reranker, reference):
    """A pair over reranker.max_length (and vLLM's max_model_len) is cut, not rejected."""
    long = "Mitochondria make ATP. " * 200
    (score,) = vllm_reranker.score_sync(QUERY, [long])
    assert 0 < score < 1
    assert score == pytest.approx(reference.score_sync(QUERY, [long])[0], abs=1e-4)
