"""The eval's metrics (ir-measures, trec_eval underneath) against an independent
implementation written here from the definitions, on real SciFact runs.

``tests/data/scifact_runs/`` holds TREC run files written by ``serve-app eval`` on the SciFact
test split (the first 60 queries, 100 documents each): every strategy and the default.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from serve_app.evaluation.beir import read_qrels
from serve_app.evaluation.metrics import (
    evaluate_run,
    per_query,
    read_trec_run,
    run_scores,
    write_trec_run,
)
from serve_app.fusion.strategies import fuse

RUNS = Path(__file__).resolve().parents[2] / "data" / "scifact_runs"
STRATEGY_RUNS = ("bm25", "splade", "dense")


def reference(ranked: list[str], relevant: dict[str, int]) -> dict[str, float]:
    """nDCG@10 (linear gain, log2 discount), Recall@100 and RR@10 from their definitions."""
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted((r for r in relevant.values() if r > 0), reverse=True)[:10]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    positives = {d for d, r in relevant.items() if r > 0}
    first = next((i for i, d in enumerate(ranked[:10]) if relevant.get(d, 0) > 0), None)
    return {
        "ndcg@10": dcg / idcg if idcg else 0.0,
        "recall@100": len(positives & set(ranked[:100])) / len(positives) if positives else 0.0,
        "mrr@10": 0.0 if first is None else 1.0 / (first + 1),
    }


@pytest.fixture(scope="module")
def real_runs(scifact_dir: Path) -> tuple[dict, dict]:
    runs = {name: read_trec_run(RUNS / f"{name}.trec.gz") for name in (*STRATEGY_RUNS, "default")}
    queries = set(runs["bm25"])
    qrels = {
        q: r for q, r in read_qrels(scifact_dir / "qrels" / "test.tsv").items() if q in queries
    }
    # Fused runs too: their ties (RRF) are where run files and trec_eval can disagree.
    per = {q: {s: runs[s][q] for s in STRATEGY_RUNS} for q in queries}
    for method in ("rrf", "weighted", "dbsf"):
        runs[f"{method}(bm25+splade+dense)"] = {q: fuse(method, per[q]) for q in queries}
    assert len(qrels) == 60
    return runs, qrels


def test_library_agrees_with_the_definitions_on_real_runs(real_runs):
    runs, qrels = real_runs
    for name, run in runs.items():
        library = per_query(run, qrels)
        mine = {q: reference([d for d, _ in run.get(q, [])], qrels[q]) for q in qrels}
        for metric in ("ndcg@10", "recall@100", "mrr@10"):
            for query_id in qrels:
                assert library[metric][query_id] == pytest.approx(
                    mine[query_id][metric], abs=1e-9
                ), (name, metric, query_id)
            mean = sum(m[metric] for m in mine.values()) / len(qrels)
            assert evaluate_run(run, qrels)[metric] == round(mean, 4), (name, metric)


def test_run_files_rescore_to_the_same_figures(real_runs, tmp_path):
    runs, qrels = real_runs
    for name in ("rrf(bm25+splade+dense)", "default"):
        path = tmp_path / "run.trec"
        write_trec_run(path, runs[name], "test")
        back = read_trec_run(path)
        assert {q: [d for d, _ in r] for q, r in back.items()} == {
            q: [d for d, _ in r] for q, r in runs[name].items()
        }
        assert evaluate_run(back, qrels) == evaluate_run(runs[name], qrels)


def test_run_scores_keep_the_system_order_through_ties():
    # trec_eval would order a tie by document id ("b" before "a", descending).
    scores = run_scores([("a", 0.5), ("b", 0.5), ("c", 0.7), ("a", 0.1)])
    assert list(scores) == ["a", "b", "c"]
    values = list(scores.values())
    assert values[0] == 0.5 and values[0] > values[1] > values[2]
    assert values[1] == pytest.approx(0.5, abs=1e-6)  # one float32 step below
    qrels = {"q": {"a": 1}}
    # "a" is ranked first by the system: RR 1.0 whatever the tie.
    assert evaluate_run({"q": [("b", 1.0), ("a", 1.0)]}, qrels)["mrr@10"] == 0.5
    assert evaluate_run({"q": [("a", 1.0), ("b", 1.0)]}, qrels)["mrr@10"] == 1.0


def test_evaluate_run_counts_missing_queries_as_zero():
    scores = evaluate_run({"q1": [("a", 1.0)]}, {"q1": {"a": 1}, "q2": {"b": 1}})
    assert scores["ndcg@10"] == pytest.approx(0.5)
    assert evaluate_run({}, {"q1": {"a": 1}})["ndcg@10"] == 0.0


def test_graded_judgements_use_linear_gain():
    run = {"q": [("x", 3.0), ("b", 2.0), ("a", 1.0)]}
    qrels = {"q": {"a": 2, "b": 1}}
    expected = reference(["x", "b", "a"], qrels["q"])
    assert evaluate_run(run, qrels)["ndcg@10"] == round(expected["ndcg@10"], 4)


def test_read_qrels_strips_crlf_and_header(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_bytes(b"query-id\tcorpus-id\tscore\r\n1\t10\t1\r\n1\t11\t2\r\n")
    assert read_qrels(path) == {"1": {"10": 1, "11": 2}}
