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


def padded_width(width: int, multiple: int, max_length: int) -> int:
    """``width`` rounded up to a multiple of ``multiple``, never past ``max_length`` (the
    model's position limit as configured) unless ``width`` itself is."""
    if multiple <= 1:
        return width
    return max(width, min(-(-width // multiple) * multiple, max_length))


def warmup_shapes(
    max_length: int, max_batch_tokens: int, batch_size: int, multiple: int
) -> list[tuple[int, int]]:
    """(rows, width) batches a model replica should run once before it takes requests.

    What ``token_budget_batches`` can produce, sampled: for widths doubling from 16 to
    ``max_length`` (each padded as requests will be), the fullest batch the budget allows
    and batches of 1, 2, 4, ... rows below it, which is where queries fall. The largest
    batch comes first, so the allocator grows to its peak once, at start.
    """
    widths = []
    width = 16
    while width < max_length:
        widths.append(padded_width(width, multiple, max_length))
        width *= 2
    widths.append(max_length)
    shapes: set[tuple[int, int]] = set()
    for width in dict.fromkeys(widths):
        fullest = max(1, min(batch_size, max_batch_tokens // width))
        shapes.add((fullest, width))
        rows = 1
        while rows < fullest:
            shapes.add((rows, width))
            rows *= 2
    return sorted(shapes, key=lambda shape: (-shape[0] * shape[1], shape))


def filler_token_id(tokenizer) -> int:
    """An ordinary token (the first of "a") to fill the start-up warm-up's batches with."""
    return int(tokenizer("a", add_special_tokens=False)["input_ids"][0])
