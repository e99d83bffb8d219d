"""Token-budget batching (as in text-embeddings-inference): sort by length, cap padded tokens."""

from __future__ import annotations


def token_budget_batches(
    lengths: list[int], max_batch_tokens: int, max_batch_size: int
) -> list[list[int]]:
    """Group item indices into batches, longest first.

    A batch's cost is ``len(batch) * longest item`` (what padding makes the model compute);
    a batch closes before that would pass ``max_batch_tokens`` or ``max_batch_size`` items.
    An item alone over the budget still gets a batch of its own. Deterministic: ties in length
    keep input order.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in order:
        candidate_longest = max(longest, lengths[index])
        if current and (
            len(current) >= max_batch_size
            or candidate_longest * (len(current) + 1) > max_batch_tokens
        ):
            batches.append(current)
            current, candidate_longest = [], lengths[index]
        current.append(index)
        longest = candidate_longest
    if current:
        batches.append(current)
    return batches


def padding_ratio(lengths: list[int], batches: list[list[int]]) -> float:
    """Share of computed positions that are padding (0 = none)."""
    computed = sum(len(b) * max(lengths[i] for i in b) for b in batches if b)
    return 0.0 if computed == 0 else 1.0 - sum(lengths) / computed
