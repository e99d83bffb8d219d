import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from serve_app.config import RerankerConfig
from serve_app.encoders.base import Reranker
from serve_app.encoders.reranker import CrossEncoderReranker


@pytest.fixture(scope="module")
def reranker(tiny_reranker_dir):
    return CrossEncoderReranker(
        RerankerConfig(enabled=True, model=str(tiny_reranker_dir), max_length=64, batch_size=2)
    )


def test_protocol(reranker):
    assert isinstance(reranker, Reranker)


def test_sigmoid_of_the_logit_of_query_passage_pairs(reranker, tiny_reranker_dir):
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_reranker_dir))
    model = AutoModelForSequenceClassification.from_pretrained(str(tiny_reranker_dir)).eval()
    passages = ["cells make ATP", "stock markets fell", "x"]
    with torch.no_grad():
        features = tokenizer(["what makes ATP"] * 3, passages, padding=True, return_tensors="pt")
        expected = torch.sigmoid(model(**features).logits.view(-1)).tolist()
    scores = reranker.score_sync("what makes ATP", passages)
    assert scores == pytest.approx(expected, abs=1e-5)
    assert all(0 < s < 1 for s in scores)


def test_batching_does_not_change_scores(reranker):
    passages = [f"passage {i} " * (i + 1) for i in range(7)]
    batched = reranker.score_sync("query", passages)
    single = [reranker.score_sync("query", [p])[0] for p in passages]
    assert batched == pytest.approx(single, abs=1e-5)


def test_long_passages_truncate_the_passage_not_the_query(reranker):
    scores = reranker.score_sync("query", ["long " * 1000])
    assert len(scores) == 1


async def test_empty(reranker):
    assert await reranker.score("q", []) == []


def test_rejects_multi_label_models(tmp_path, tiny_reranker_dir):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig.from_pretrained(str(tiny_reranker_dir), num_labels=3)
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(str(tiny_reranker_dir)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="3 labels"):
        CrossEncoderReranker(RerankerConfig(enabled=True, model=str(tmp_path)))
