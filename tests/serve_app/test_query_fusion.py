"""Multi-query aggregation: RRF over sub-queries blended with the average similarity."""

import pytest

from serve_app.fusion.queries import aggregate_sub_queries, distinct_queries, first_per_document


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


def test_weights_by_hand():
    lists = [[("a", 0.9), ("b", 0.5)], [("b", 0.7), ("c", 0.4)]]
    out = {
        d.doc_id: d
        for d in aggregate_sub_queries(lists, k=1, similarity_weight=0.5, weights=[3, 1])
    }
    ceiling = (3 + 1) / 2  # sum of weights / (k + 1)
    assert out["a"].rrf == pytest.approx(3 / 2)
    assert out["b"].rrf == pytest.approx(3 / 3 + 1 / 2)
    assert out["b"].avg_similarity == pytest.approx((3 * 0.5 + 1 * 0.7) / 4)
    assert out["b"].normalized_rrf == pytest.approx(1.5 / ceiling)
    assert out["a"].avg_similarity == pytest.approx(0.9)  # found by one list: its own


def test_equal_weights_are_the_unweighted_aggregation():
    lists = [[("a", 0.9), ("b", 0.5), ("d", 0.3)], [("b", 0.7), ("c", 0.4)], [("c", 0.85)]]
    for k in (1, 10, 60):
        plain = aggregate_sub_queries(lists, k=k)
        scaled = aggregate_sub_queries(lists, k=k, weights=[2.5, 2.5, 2.5])
        assert [d.doc_id for d in plain] == [d.doc_id for d in scaled]
        for p, s in zip(plain, scaled, strict=True):
            assert p.score == pytest.approx(s.score)


def test_a_heavy_question_list_ranks_as_the_question_alone():
    question = [("q1", 0.6), ("q2", 0.55), ("q3", 0.5)]
    rewrites = [[("r", 0.9), ("q3", 0.8)], [("r", 0.9), ("q3", 0.7)]]
    even = [d.doc_id for d in aggregate_sub_queries([question, *rewrites], k=1)]
    heavy = [
        d.doc_id for d in aggregate_sub_queries([question, *rewrites], k=1, weights=[1000, 1, 1])
    ]
    assert even[0] != "q1"
    assert heavy[:3] == ["q1", "q2", "q3"]


@pytest.mark.parametrize("weights", [[1.0], [1.0, 0.0], [1.0, -1.0], [1.0, 1.0, 1.0]])
def test_weights_must_be_one_positive_per_list(weights):
    with pytest.raises(ValueError, match="one positive weight per sub-query list"):
        aggregate_sub_queries([[("a", 0.5)], [("b", 0.5)]], weights=weights)
