"""Multi-query aggregation: RRF over sub-queries blended with the average similarity."""

import pytest

from serve_app.query_fusion import aggregate_sub_queries, distinct_queries, first_per_document


def test_formula_by_hand():
    lists = [
        [("a", 0.9), ("b", 0.5)],
        [("b", 0.7), ("c", 0.4)],
    ]
    out = {d.doc_id: d for d in aggregate_sub_queries(lists, k=1, similarity_weight=0.5)}
    ceiling = 2 / 2  # n / (k + 1)
    # a: rank 1 in list 0 only; b: rank 2 in list 0 and rank 1 in list 1; c: rank 2 in list 1.
    assert out["a"].rrf == pytest.approx(1 / 2)
    assert out["b"].rrf == pytest.approx(1 / 3 + 1 / 2)
    assert out["c"].rrf == pytest.approx(1 / 3)
    assert out["b"].avg_similarity == pytest.approx(0.6)
    assert out["b"].normalized_rrf == pytest.approx((1 / 3 + 1 / 2) / ceiling)
    assert out["b"].score == pytest.approx(0.5 * 0.6 + 0.5 * (5 / 6))
    assert out["b"].found_by == [0, 1] and out["b"].ranks == {0: 2, 1: 1}
    assert out["a"].found_by == [0] and out["c"].found_by == [1]


def test_found_by_more_sub_queries_ranks_higher_at_equal_similarity():
    lists = [[("x", 0.5), ("y", 0.5)], [("y", 0.5)], [("y", 0.5)]]
    ranked = [d.doc_id for d in aggregate_sub_queries(lists)]
    assert ranked == ["y", "x"]


def test_weight_one_is_similarity_only_and_zero_is_rrf_only():
    lists = [[("low", 0.1), ("high", 0.9)]]
    assert [d.doc_id for d in aggregate_sub_queries(lists, similarity_weight=1.0)] == [
        "high",
        "low",
    ]
    assert [d.doc_id for d in aggregate_sub_queries(lists, similarity_weight=0.0)] == [
        "low",
        "high",
    ]


def test_one_document_counts_once_per_sub_query_at_its_best_rank():
    lists = [[("d", 0.8), ("e", 0.6), ("d", 0.2)]]
    out = {d.doc_id: d for d in aggregate_sub_queries(lists, k=60)}
    assert out["d"].ranks == {0: 1}
    assert out["d"].avg_similarity == pytest.approx(0.8)
    assert out["d"].normalized_rrf == pytest.approx(1.0)  # first in the only list
    assert first_per_document([("d", 1.0), ("d", 0.0)]) == [("d", 1.0)]


def test_ties_break_by_best_rank_then_id_and_empty_inputs():
    lists = [[("b", 0.5)], [("a", 0.5)]]
    assert [d.doc_id for d in aggregate_sub_queries(lists)] == ["a", "b"]
    assert aggregate_sub_queries([]) == []
    assert aggregate_sub_queries([[], []]) == []
    with pytest.raises(ValueError):
        aggregate_sub_queries(lists, similarity_weight=1.5)


def test_distinct_queries_deduplicates_and_caps():
    queries = ["Aspirin  and stroke", "aspirin and STROKE", " ", "statins", "beta blockers"]
    assert distinct_queries(queries, 2) == ["Aspirin and stroke", "statins"]
    assert distinct_queries(queries, 10) == ["Aspirin and stroke", "statins", "beta blockers"]
