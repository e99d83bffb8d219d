"""The model guard's one judgement (``stores/binding.py``), which the stores open or refuse
by and ``validate`` reports by."""

from __future__ import annotations

from serve_app.stores.binding import judge_binding

RECORDED = {"dense_model": "m", "dense_dim": 4, "splade_model": "s", "bm25_model": "b"}


def test_the_same_binding_opens_as_it_is():
    verdict = judge_binding(RECORDED, dict(RECORDED))
    assert not verdict.refused and not verdict.records_revisions and verdict.describe() == ""


def test_revisions_an_older_index_never_recorded_are_recorded_not_refused():
    configured = {**RECORDED, "dense_revision": "abc", "splade_revision": None}
    verdict = judge_binding(RECORDED, configured)
    assert verdict.unrecorded == ["dense_revision"]  # a None revision equals an absent one
    assert verdict.records_revisions and not verdict.refused
    assert "recorded no dense_revision" in verdict.unrecorded_warning("the index")


def test_a_recorded_revision_that_differs_is_refused():
    verdict = judge_binding(
        {**RECORDED, "dense_revision": "abc"}, {**RECORDED, "dense_revision": "def"}
    )
    assert verdict.refused and not verdict.records_revisions
    assert verdict.describe() == "dense_revision: recorded 'abc', configured 'def'"


def test_another_model_is_refused_even_beside_unrecorded_revisions():
    configured = {**RECORDED, "dense_model": "other", "dense_revision": "abc"}
    verdict = judge_binding(RECORDED, configured)
    assert verdict.refused and not verdict.records_revisions
    assert verdict.differences == {"dense_model": ("m", "other")}


def test_nested_fields_and_fields_only_one_side_has_are_named():
    recorded = {"models": RECORDED, "mapping": 2, "gone": True}
    configured = {"models": {**RECORDED, "dense_dim": 8}, "mapping": 2}
    verdict = judge_binding(recorded, configured)
    assert verdict.differences == {"dense_dim": (4, 8), "gone": (True, None)}
    assert judge_binding(None, RECORDED).differences == {"binding": (None, RECORDED)}
