"""Sentence segmentation stays linear in the input on whitespace-free runs."""

import time

import pytest

from serve_app.chunking.sentences import MAX_RUN, bounded_runs


def test_bounded_runs_keeps_length_and_short_words():
    text = "Short words stay. " + "#" * 1000 + " end " + "x" * MAX_RUN
    bounded = bounded_runs(text)
    assert len(bounded) == len(text)
    assert bounded.startswith("Short words stay. ") and bounded.endswith("x" * MAX_RUN)
    assert max(len(run) for run in bounded.split()) <= MAX_RUN
    assert [i for i, c in enumerate(bounded) if c != text[i]] == list(
        range(18 + MAX_RUN, 18 + 1000, MAX_RUN + 1)
    )


@pytest.mark.parametrize("run", ["#" * 20_000, "a." * 10_000, ")" * 20_000])
def test_a_long_punctuation_run_is_split_in_bounded_time(sentence_splitter, run):
    """spaCy's affix loop is quadratic on such runs: 8,000 '#' took 24 s before the cut;
    20,000 would take minutes. Spans still index the original text."""
    text = f"Before the run. {run} After the run."
    started = time.perf_counter()
    spans = sentence_splitter.split(text)
    assert time.perf_counter() - started < 20
    assert spans and all(0 <= s < e <= len(text) for s, e in spans)
    assert text[spans[0][0] : spans[0][1]].startswith("Before")
