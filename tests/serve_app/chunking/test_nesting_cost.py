"""Cost linear in input: markup nested as deep as it likes (block quotes, list items) costs
the loader, the chunker and the encoders no more per byte than plain prose of the same size.

Measured as ratios to plain text in the same process (chunks per KB, model tokens per KB:
what the encoders are given, and loader + chunker seconds per MB), so the bound holds on any
machine; the bounds are generous, the nested cases cost 2.5-5 times plain text without the
flattening (see docs/operations.md, "Hostile input")."""

from __future__ import annotations

import time

import pytest

from serve_app.chunking.base import contextual_header
from serve_app.loaders import load_bytes

SIZE = 20_000  # bytes of each input
DEPTH = 60  # nesting levels the lines cycle through
CHUNK_RATIO = 1.5  # chunks (and tokens) per KB, nested over plain
SECONDS_RATIO = 2.5  # loader + chunker seconds per MB, nested over plain
REPEATS = 3  # the fastest of these is each case's time


def sentence(i: int) -> str:
    return f"Line {i} says plasmids carry resistance genes between soil bacteria."


def plain(size: int) -> bytes:
    return " ".join(sentence(i) for i in range(size // 40)).encode()[:size]


def lines(prefix_of, size: int) -> bytes:
    text = "\n".join(prefix_of(i % DEPTH + 1) + sentence(i) for i in range(size // 20))
    return text.encode()[:size]


def html_quotes(size: int) -> bytes:
    """HTML block quotes nested up to ``DEPTH`` deep (within the parser's 255), ``size`` bytes."""
    parts, used, i = ["<html><body>"], 12, 0
    while used < size:
        depth = i % DEPTH + 1
        part = "<blockquote>" * depth + f"<p>{sentence(i)}</p>" + "</blockquote>" * depth
        parts.append(part)
        used += len(part)
        i += 1
    page = "".join(parts)
    return (page[: size - 14] + "</body></html>").encode()


NESTED = {
    "quotes.md": lambda size: lines(lambda depth: ">" * depth + " ", size),
    "spaced-quotes.md": lambda size: lines(lambda depth: "> " * depth, size),
    "list-items.md": lambda size: lines(lambda depth: "- " * depth, size),
    # Of "1. 1. ... text" the loader keeps one number ("1. text": an item's number is text), so
    # this case costs plain text plus one short token per line: within the same bounds.
    "ordered-items.md": lambda size: lines(lambda depth: "1. " * depth, size),
    "quotes.html": html_quotes,
}


def cost(chunker, counter, data: bytes, name: str) -> tuple[int, int, float]:
    """(chunks, model tokens with headers, fastest loader + chunker seconds)."""
    best = float("inf")
    for _ in range(REPEATS):
        started = time.perf_counter()
        chunks = chunker.chunk(load_bytes(data, name))
        best = min(best, time.perf_counter() - started)
    texts = [f"{contextual_header(c.title, c.heading_chain)}\n{c.text}" for c in chunks]
    return len(chunks), sum(counter.count(texts)), best


@pytest.fixture(scope="module")
def sections(minilm_counter, sentence_splitter, local_config):
    """The configured chunker (sections, 512 tokens): the one whose cost was seen to grow."""
    from serve_app.chunking.sections import SectionChunker

    chunker = local_config.chunker
    return SectionChunker(
        minilm_counter, sentence_splitter, chunker.max_tokens, chunker.overlap_tokens
    )


@pytest.fixture(scope="module")
def baseline(sections, minilm_counter):
    return cost(sections, minilm_counter, plain(SIZE), "plain.txt")


@pytest.mark.parametrize("name", NESTED)
def test_nested_markup_costs_no_more_per_byte_than_plain_text(
    sections, minilm_counter, baseline, name
):
    data = NESTED[name](SIZE)
    assert len(data) == SIZE
    chunks, tokens, seconds = cost(sections, minilm_counter, data, name)
    plain_chunks, plain_tokens, plain_seconds = baseline
    measured = (
        f"{name}: {chunks} chunks, {tokens} tokens, {seconds:.3f} s; plain text of the same "
        f"size: {plain_chunks} chunks, {plain_tokens} tokens, {plain_seconds:.3f} s"
    )
    assert chunks <= CHUNK_RATIO * plain_chunks, measured
    assert tokens <= CHUNK_RATIO * plain_tokens, measured
    assert seconds <= SECONDS_RATIO * plain_seconds, measured
