"""Greedy packing of sentences into chunks under a token budget."""

from __future__ import annotations

from serve_app.chunking.tokens import TokenCounter


def pack_sentences(
    canonical: str,
    sentences: list[tuple[int, int]],
    counter: TokenCounter,
    budget: int,
    overlap_tokens: int = 0,
    breakpoints: frozenset[int] = frozenset(),
) -> list[tuple[int, int]]:
    """Character spans of chunks made of whole consecutive sentences.

    A chunk closes when the next sentence would exceed ``budget`` or a breakpoint (index of a
    sentence that must start a new chunk) is reached. After a budget close, the next chunk
    starts with the trailing sentences of the previous one that fit in ``overlap_tokens``.
    A sentence longer than the budget becomes token windows of its own. Every returned span
    is re-counted and windowed if over budget, so no chunk exceeds it.
    """
    if not sentences:
        return []
    counts = counter.count([canonical[s:e] for s, e in sentences])
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index, tokens in enumerate(counts):
        if current and (index in breakpoints or used + tokens > budget):
            groups.append(current)
            carried: list[int] = []
            if index not in breakpoints and overlap_tokens > 0:
                carried_tokens = 0
                for previous in reversed(current):
                    if carried_tokens + counts[previous] > overlap_tokens:
                        break
                    carried.insert(0, previous)
                    carried_tokens += counts[previous]
                # Never carry so much that the new sentence does not fit.
                while carried and carried_tokens + tokens > budget:
                    carried_tokens -= counts[carried.pop(0)]
            current, used = carried, sum(counts[i] for i in carried)
        current.append(index)
        used += tokens
    groups.append(current)
    spans = [(sentences[g[0]][0], sentences[g[-1]][1]) for g in groups]
    return enforce_budget(canonical, spans, counter, budget)


def enforce_budget(
    canonical: str, spans: list[tuple[int, int]], counter: TokenCounter, budget: int
) -> list[tuple[int, int]]:
    """Split any span over ``budget`` tokens into token windows (no overlap)."""
    counts = counter.count([canonical[s:e] for s, e in spans])
    out: list[tuple[int, int]] = []
    for (start, end), tokens in zip(spans, counts, strict=True):
        if tokens <= budget:
            out.append((start, end))
        else:
            out.extend(counter.windows(canonical[start:end], start, budget, 0))
    return out
