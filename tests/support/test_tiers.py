"""The suite's budget gate: a slower host stretches the budgets, within a cap; a faster one
never shrinks them; a test's tier follows from where it lives."""

from __future__ import annotations

import pytest

from tests.support.tiers import MAX_SLOWDOWN, REFERENCE_WORK_S, slowdown, tier_of


@pytest.mark.parametrize(
    "work_s,scale",
    [
        (REFERENCE_WORK_S * 0.5, 1.0),
        (REFERENCE_WORK_S, 1.0),
        (REFERENCE_WORK_S * 1.2, 1.2),
        (REFERENCE_WORK_S * 10, MAX_SLOWDOWN),
    ],
)
def test_budgets_stretch_with_a_slower_host_up_to_the_cap(work_s, scale):
    assert slowdown(work_s) == pytest.approx(scale)


def test_a_tests_tier_is_its_longest_matching_path():
    assert tier_of("tests/e2e/test_serve_app.py::test_x") == "ray"
    assert tier_of("tests/e2e/test_benchmarks_smoke.py::test_x") == "bench"
    assert tier_of("tests/serve_app/api/test_app.py::test_x") == "service"
    assert tier_of("tests/serve_app/test_config.py::test_x") == "unit"
    assert tier_of("tests/serve_app/test_config.py::test_x", {"vllm": True}) == "vllm"
