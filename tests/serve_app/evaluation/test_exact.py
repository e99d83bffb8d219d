"""Exact retrieval for tuning: the same scores the engine computes, over whole query sets."""

import math

import numpy as np
import pytest
import qdrant_edge as edge

from serve_app.encoders.bm25 import bm25_weights, term_counts
from serve_app.evaluation.encodings import SparseMatrix
from serve_app.evaluation.exact import (
    Bm25Scorer,
    Bm25Setting,
    Rm3Setting,
    SparseIndex,
    rm3_query,
    sparse_top_hits,
    top_hits,
)

TITLES = ["Vitamin D and bone density", "Statins in heart failure", "Bone marrow transplants"]
BODIES = [
    "Vitamin D supplements raised bone mineral density in older women.",
    "Statins lowered mortality in patients with chronic heart failure over five years.",
    "Marrow transplants restore blood cells; bone pain is common after the procedure.",
]


def test_sparse_index_is_the_dot_product():
    rng = np.random.default_rng(3)
    dense = rng.random((20, 50)) * (rng.random((20, 50)) < 0.2)
    rows = [{int(j): float(dense[i, j]) for j in np.flatnonzero(dense[i])} for i in range(20)]
    index = SparseIndex(SparseMatrix.from_rows(rows))
    query = {3: 0.5, 7: 2.0, 49: 1.0, 999: 4.0}  # 999 is in no document
    expected = dense[:, [3, 7, 49]] @ np.array([0.5, 2.0, 1.0])
    assert index.scores(list(query), list(query.values())) == pytest.approx(expected)
    assert index.document_frequency(3) == int((dense[:, 3] > 0).sum())


def test_term_counts_rebuild_the_engines_bm25_weights():
    model = edge.Bm25(edge.Bm25Config(k=0.9, b=0.4, avg_len=12.0, language="english"))
    for title, body in zip(TITLES, BODIES, strict=True):
        text = f"{title}\n{body}"
        engine = model.embed_document(text)
        ours = bm25_weights(term_counts(text), 0.9, 0.4, 12.0)
        assert ours == pytest.approx(dict(zip(engine.indices, engine.values, strict=True)))


def test_bm25_scorer_is_idf_times_weights_and_title_weight_counts_titles_twice():
    titles = [term_counts(t) for t in TITLES]
    bodies = [term_counts(b) for b in BODIES]
    query = {t: 1.0 for t in term_counts("bone density")}
    plain = Bm25Scorer(titles, bodies, Bm25Setting(k1=1.2, b=0.75, avg_len=10.0)).scores(query)
    n = len(TITLES)
    expected = []
    for title, body in zip(TITLES, BODIES, strict=True):
        weights = bm25_weights(term_counts(f"{title}\n{body}"), 1.2, 0.75, 10.0)
        score = 0.0
        for term in query:
            df = sum(term in {**a, **b} for a, b in zip(titles, bodies, strict=True))
            score += weights.get(term, 0.0) * math.log(1 + (n - df + 0.5) / (df + 0.5))
        expected.append(score)
    assert plain == pytest.approx(expected)
    assert plain[0] > plain[2] > plain[1] == 0
    doubled = Bm25Scorer(titles, bodies, Bm25Setting(title_weight=2.0)).counts
    bone = next(iter(term_counts("bone")))
    assert doubled[0][bone] == 2 * titles[0][bone] + bodies[0][bone]
    separate = Bm25Scorer(titles, bodies, Bm25Setting(fields="separate", title_weight=0.0))
    assert separate.scores(query)[0] == pytest.approx(
        Bm25Scorer([{}] * n, bodies, Bm25Setting(fields="separate")).scores(query)[0]
    )


def test_rm3_keeps_the_query_and_adds_feedback_terms():
    counts = [{1: 3.0, 2: 1.0}, {1: 1.0, 3: 1.0}, {4: 5.0}]
    expanded = rm3_query({1: 1.0, 9: 1.0}, [(0, 2.0), (1, 1.0)], counts, Rm3Setting(2, 2, 0.6))
    assert sum(expanded.values()) == pytest.approx(1.0)
    assert expanded[9] == pytest.approx(0.3)  # alpha / |q|, not in the feedback
    assert set(expanded) == {1, 2, 9} or set(expanded) == {1, 3, 9}
    assert 4 not in expanded  # the third chunk was not fed back
    # P(1|R) = 2/3 * 3/4 + 1/3 * 1/2 = 2/3: the strongest feedback term.
    assert expanded[1] > expanded[9]


def test_top_hits_order_and_sparse_cut():
    scores = np.array([0.2, 0.0, 0.9, 0.2, -0.1])
    assert top_hits(scores, 3) == [(2, 0.9), (0, 0.2), (3, 0.2)]
    assert sparse_top_hits(scores, 5) == [(2, 0.9), (0, 0.2), (3, 0.2)]
