import math

import pytest

from serve_app.evaluation.beir import read_qrels
from serve_app.evaluation.metrics import evaluate_run, mrr_at_k, ndcg_at_k, recall_at_k


def test_ndcg_perfect_and_partial():
    assert ndcg_at_k(["a", "b"], {"a": 1, "b": 1}) == pytest.approx(1.0)
    expected = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(["x", "a"], {"a": 1, "b": 1}) == pytest.approx(expected)
    assert ndcg_at_k(["x"], {"a": 1}) == 0.0
    assert ndcg_at_k(["a"], {}) == 0.0


def test_recall_and_mrr():
    assert recall_at_k(["a", "x", "b"], {"a": 1, "b": 1, "c": 1}, 2) == pytest.approx(1 / 3)
    assert mrr_at_k(["x", "y", "a"], {"a": 1}) == pytest.approx(1 / 3)
    assert mrr_at_k(["x"], {"a": 1}) == 0.0


def test_evaluate_run_counts_missing_queries_as_zero():
    scores = evaluate_run({"q1": ["a"]}, {"q1": {"a": 1}, "q2": {"b": 1}})
    assert scores["ndcg@10"] == pytest.approx(0.5)


def test_read_qrels_strips_crlf_and_header(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_bytes(b"query-id\tcorpus-id\tscore\r\n1\t10\t1\r\n1\t11\t2\r\n")
    assert read_qrels(path) == {"1": {"10": 1, "11": 2}}
