"""Token counting in the dense model's tokenizer, so chunk sizes match what the model sees."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@lru_cache(maxsize=8)
def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """The fast tokenizer at ``path``. Read straight from its ``tokenizer.json`` where there is
    one: ``AutoTokenizer`` imports PyTorch (4 s of every replica start here, in processes such
    as the ingress and the store that never run a model) to pick a class whose counts and
    offsets are the same (tests/serve_app/chunking/test_tokens.py compares them)."""
    if (Path(path) / "tokenizer.json").is_file():
        from transformers import PreTrainedTokenizerFast

        tokenizer: PreTrainedTokenizerBase = PreTrainedTokenizerFast.from_pretrained(path)
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.model_max_length = 10**9  # counting only; the encoders truncate themselves
    if not tokenizer.is_fast:
        raise ValueError(f"tokenizer at {path} is not a fast tokenizer (offsets are needed)")
    return tokenizer


class TokenCounter:
    """Counts tokens and maps token windows to character spans.

    ``reserved`` tokens (special tokens the encoder adds, an appended EOS) are subtracted from
    every budget, so a chunk within budget never exceeds the model limit.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, reserved: int | None = None) -> None:
        self.tokenizer = tokenizer
        specials = len(tokenizer("", add_special_tokens=True)["input_ids"])
        self.reserved = specials if reserved is None else reserved

    @classmethod
    def from_path(cls, path: str, extra_reserved: int = 0) -> TokenCounter:
        counter = cls(load_tokenizer(path))
        counter.reserved += extra_reserved
        return counter

    def count(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        encoded = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        return [len(ids) for ids in encoded]

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return self.offsets_many([text])[0]

    def offsets_many(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Each text's token character spans, from one tokenizer call (which a process that
        allows the tokenizers' thread pool splits over its threads)."""
        if not texts:
            return []
        encoded = self.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
        return [[(int(s), int(e)) for s, e in spans] for spans in encoded["offset_mapping"]]

    def windows(self, text: str, base: int, size: int, overlap: int) -> list[tuple[int, int]]:
        """Character spans (shifted by ``base``) of token windows of ``size`` with ``overlap``."""
        return token_windows(self.offsets(text), base, size, overlap)


def token_windows(
    offsets: list[tuple[int, int]], base: int, size: int, overlap: int
) -> list[tuple[int, int]]:
    """Character spans (shifted by ``base``) of windows of ``size`` tokens with ``overlap``,
    from a text's token spans."""
    if not offsets:
        return []
    step = max(1, size - overlap)
    spans: list[tuple[int, int]] = []
    start = 0
    while True:
        end = min(start + size, len(offsets))
        s, e = offsets[start][0], offsets[end - 1][1]
        spans.append((base + s, base + e))
        if end == len(offsets):
            break
        start += step
    return spans
