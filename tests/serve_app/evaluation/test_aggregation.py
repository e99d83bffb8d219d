import pytest

from serve_app.evaluation.aggregation import AGGREGATIONS, aggregate

# (doc, chunk order, score), best first: b's second chunk is strong, c only has a late chunk.
HITS = [("a", 0, 0.9), ("b", 1, 0.8), ("b", 0, 0.7), ("c", 2, 0.6), ("a", 1, 0.1)]


@pytest.mark.parametrize(
    ("method", "n", "expected"),
    [
        ("max", 1, [("a", 0.9), ("b", 0.8), ("c", 0.6)]),
        ("sum", 1, [("a", 0.9), ("b", 0.8), ("c", 0.6)]),
        ("sum", 2, [("b", 1.5), ("a", 1.0), ("c", 0.6)]),
        ("first", 1, [("a", 0.9), ("b", 0.7)]),
    ],
)
def test_each_aggregation(method, n, expected):
    got = aggregate(iter(HITS), method, n)
    assert [d for d, _ in got] == [d for d, _ in expected]
    assert [s for _, s in got] == pytest.approx([s for _, s in expected])


@pytest.mark.parametrize("method", AGGREGATIONS)
def test_every_aggregation_ranks_each_document_once_best_first(method):
    got = aggregate(HITS, method, 3)
    assert len({d for d, _ in got}) == len(got)
    assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)


def test_sum_ties_keep_the_first_seen_document():
    assert aggregate([("x", 0, 0.5), ("y", 0, 0.5)], "sum", 2) == [("x", 0.5), ("y", 0.5)]


def test_unknown_aggregation():
    with pytest.raises(ValueError):
        aggregate(HITS, "mean", 2)  # type: ignore[arg-type]
