import math

import pytest

from serve_app.fusion.strategies import RRF_K, contributions, dbsf, fuse, rrf, weighted_minmax

LISTS = {
    "bm25": [("a", 12.0), ("b", 9.0), ("c", 3.0)],
    "dense": [("b", 0.9), ("d", 0.8), ("a", 0.1)],
}


class TestRrf:
    def test_formula(self):
        fused = dict(rrf(LISTS, k=60))
        assert fused["a"] == pytest.approx(1 / 61 + 1 / 63)
        assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
        assert fused["d"] == pytest.approx(1 / 62)
        assert fused["c"] == pytest.approx(1 / 63)

    def test_order_best_first(self):
        assert [d for d, _ in rrf(LISTS)] == ["b", "a", "d", "c"]

    def test_weights_scale_contributions(self):
        fused = dict(rrf(LISTS, weights={"bm25": 2.0, "dense": 0.5}))
        assert fused["a"] == pytest.approx(2 / (RRF_K + 1) + 0.5 / (RRF_K + 3))

    def test_zero_weight_drops_list(self):
        assert [d for d, _ in rrf(LISTS, weights={"dense": 0.0})] == ["a", "b", "c"]

    def test_invalid_k(self):
        with pytest.raises(ValueError):
            rrf(LISTS, k=0)


class TestWeightedMinMax:
    def test_formula(self):
        fused = dict(weighted_minmax(LISTS, weights={"bm25": 0.3, "dense": 0.7}))
        assert fused["a"] == pytest.approx(0.3 * 1.0 + 0.7 * 0.0)
        assert fused["b"] == pytest.approx(0.3 * (6 / 9) + 0.7 * 1.0)
        assert fused["d"] == pytest.approx(0.7 * (0.7 / 0.8))

    def test_constant_scores_normalise_to_one(self):
        fused = dict(weighted_minmax({"x": [("a", 2.0), ("b", 2.0)]}))
        assert fused == {"a": 1.0, "b": 1.0}


class TestDbsf:
    def test_formula_no_clipping(self):
        scores = [12.0, 9.0, 3.0]
        mean = sum(scores) / 3
        std = math.sqrt(sum((s - mean) ** 2 for s in scores) / 2)  # sample std
        fused = dict(dbsf({"bm25": LISTS["bm25"]}))
        for doc, score in zip("abc", scores, strict=True):
            assert fused[doc] == pytest.approx((score - (mean - 3 * std)) / (6 * std))

    def test_zero_spread(self):
        assert dict(dbsf({"x": [("a", 1.0)]})) == {"a": 0.5}


@pytest.mark.parametrize("method", ["rrf", "weighted", "dbsf"])
class TestEveryMethod:
    def test_deterministic_tie_break(self, method):
        # Identical contributions: ties fall back to best rank, then id.
        lists = {"x": [("b", 1.0), ("a", 1.0)], "y": [("a", 1.0), ("b", 1.0)]}
        first = fuse(method, lists)
        assert first == fuse(method, dict(reversed(list(lists.items()))))
        assert [d for d, _ in first] == ["a", "b"]

    def test_empty_inputs(self, method):
        assert fuse(method, {}) == []
        assert fuse(method, {"x": []}) == []

    def test_union_of_ids(self, method):
        assert {d for d, _ in fuse(method, LISTS)} == {"a", "b", "c", "d"}

    def test_single_list_keeps_order(self, method):
        assert [d for d, _ in fuse(method, {"bm25": LISTS["bm25"]})] == ["a", "b", "c"]


def test_unknown_method():
    with pytest.raises(ValueError):
        fuse("nope", LISTS)  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["rrf", "weighted", "dbsf"])
@pytest.mark.parametrize("weights", [None, {"bm25": 2.0, "dense": 0.5}, {"dense": 0.0}])
def test_contributions_add_up_to_the_fused_score(method, weights):
    fused = fuse(method, LISTS, weights=weights)
    shares = contributions(method, LISTS, [d for d, _ in fused], weights=weights)
    for doc, score in fused:
        assert sum(shares[doc].values()) == pytest.approx(score, abs=1e-12), (doc, shares)
    if weights == {"dense": 0.0}:
        assert all(set(per) <= {"bm25"} for per in shares.values())


def test_contributions_name_the_lists_that_returned_the_id():
    shares = contributions("rrf", LISTS, ["a", "d"])
    assert shares == {
        "a": {"bm25": pytest.approx(1 / 61), "dense": pytest.approx(1 / 63)},
        "d": {"dense": pytest.approx(1 / 62)},
    }
