"""Congruence: the pipeline's fusion functions against ranx's (``ranx.fuse``) on real SciFact
runs (``tests/data/scifact_runs/``: BM25, SPLADE and dense from ``serve-app eval``).

* RRF: identical, ``sum_s w_s / (k + rank_s)`` (ranx ``method="rrf"``, no normalisation).
* weighted: identical to ranx's min-max normalisation with ``wsum``, except for a list whose
  scores are all equal: ranx maps it to 0 (its denominator floors at 1e-9), we map it to 1.0
  (one hit that is alone in its list still counts fully).
* DBSF: ranx has no DBSF. Its ``zmuv`` normalisation is the same standard score with the
  population standard deviation; DBSF is ``(x - (mean - 3 sd)) / (6 sd)`` with the sample
  standard deviation (Qdrant's definition), i.e. ``z_pop * sqrt((n - 1) / n) / 6 + 1/2``:
  the same ordering within a list, plus a constant 1/2 for each list a document is in (ranx's
  ``zmuv`` + ``wsum`` gives a document missing from a list its mean, DBSF its mean - 3 sd). The
  test checks that identity document by document.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import ranx

from serve_app.evaluation.metrics import read_trec_run, run_scores
from serve_app.fusion.strategies import dbsf, rrf, weighted_minmax

RUNS = Path(__file__).resolve().parents[1] / "data" / "scifact_runs"
STRATEGIES = ("bm25", "splade", "dense")
WEIGHTS = {"bm25": 1.5, "splade": 0.5, "dense": 1.0}


@pytest.fixture(scope="module")
def lists() -> dict[str, dict[str, list[tuple[str, float]]]]:
    """query -> strategy -> ranked (doc, score), scores strictly decreasing (as run files)."""
    runs = {s: read_trec_run(RUNS / f"{s}.trec.gz") for s in STRATEGIES}
    return {q: {s: list(run_scores(runs[s][q]).items()) for s in STRATEGIES} for q in runs["bm25"]}


def ranx_runs(lists) -> list:
    return [ranx.Run({q: dict(per[s]) for q, per in lists.items()}, name=s) for s in STRATEGIES]


def assert_same(ours: dict[str, list[tuple[str, float]]], theirs, tolerance: float = 1e-9):
    fused = theirs.to_dict()
    for query_id, ranked in ours.items():
        assert dict(ranked) == pytest.approx(fused[query_id], abs=tolerance)
        # Same order wherever the fused scores are apart.
        scores = [s for _, s in ranked]
        assert all(a >= b for a, b in itertools.pairwise(scores))


@pytest.mark.parametrize("k", [10, 60])
def test_rrf_matches_ranx(lists, k):
    ours = {q: rrf(per, k=k) for q, per in lists.items()}
    assert_same(ours, ranx.fuse(ranx_runs(lists), norm=None, method="rrf", params={"k": k}))


def test_weighted_minmax_matches_ranx_wsum(lists):
    ours = {q: weighted_minmax(per, weights=WEIGHTS) for q, per in lists.items()}
    theirs = ranx.fuse(
        ranx_runs(lists),
        norm="min-max",
        method="wsum",
        params={"weights": [WEIGHTS[s] for s in STRATEGIES]},
    )
    assert_same(ours, theirs)


def test_weighted_minmax_differs_from_ranx_on_a_flat_list():
    lists = {"q": {"bm25": [("a", 2.0), ("b", 1.0)], "dense": [("c", 0.5)]}}
    ours = dict(weighted_minmax(lists["q"]))
    runs = [ranx.Run({"q": dict(lists["q"][s])}, name=s) for s in ("bm25", "dense")]
    theirs = ranx.fuse(runs, norm="min-max", method="wsum", params={"weights": [1.0, 1.0]})
    assert ours["c"] == 1.0 and theirs.to_dict()["q"]["c"] == 0.0
    assert ours["a"] == theirs.to_dict()["q"]["a"] == 1.0


def test_dbsf_is_ranx_zmuv_rescaled_plus_presence(lists):
    ours = {q: dict(dbsf(per, weights=WEIGHTS)) for q, per in lists.items()}
    normalised = {
        s: ranx.normalize(run, "zmuv").to_dict()
        for s, run in zip(STRATEGIES, ranx_runs(lists), strict=True)
    }
    for query_id, per in lists.items():
        expected: dict[str, float] = {}
        for s in STRATEGIES:
            n = len(per[s])
            scale = math.sqrt((n - 1) / n) / 6
            for doc, z in normalised[s][query_id].items():
                expected[doc] = expected.get(doc, 0.0) + WEIGHTS[s] * (z * scale + 0.5)
        assert ours[query_id] == pytest.approx(expected, abs=1e-9)
