import pytest

from serve_app.encoders.token_batches import padding_ratio, token_budget_batches


def test_longest_first_and_every_item_once():
    lengths = [5, 50, 7, 49, 6, 51]
    batches = token_budget_batches(lengths, max_batch_tokens=120, max_batch_size=8)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(6))
    assert flat[:3] == [5, 1, 3]


def test_budget_counts_padded_tokens():
    lengths = [100, 10, 10, 10]
    batches = token_budget_batches(lengths, max_batch_tokens=200, max_batch_size=32)
    for batch in batches:
        assert len(batch) * max(lengths[i] for i in batch) <= 200 or len(batch) == 1


def test_size_cap_and_oversized_item():
    assert token_budget_batches([1000], 10, 4) == [[0]]
    assert all(len(b) <= 2 for b in token_budget_batches([3] * 7, 10_000, 2))


def test_sorting_reduces_padding_vs_fixed_count():
    lengths = [10, 200, 12, 190, 11, 205, 9, 198]
    fixed = [list(range(i, i + 2)) for i in range(0, 8, 2)]
    budget = token_budget_batches(lengths, 10_000, 2)
    assert padding_ratio(lengths, budget) < padding_ratio(lengths, fixed)


@pytest.mark.parametrize("lengths", [[], [1], [4, 4, 4]])
def test_edge_cases(lengths):
    batches = token_budget_batches(lengths, 8, 2)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
