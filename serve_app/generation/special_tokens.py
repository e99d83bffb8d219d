"""Special-token strings in untrusted text made plain text.

llama.cpp's server and vLLM tokenize a templated chat prompt with special tokens parsed: the
text ``<|im_end|>`` inside a passage, a title or a question would become the real
end-of-turn token and let a document speak as the system. Every message's content is
rewritten before the chat template sees it: each occurrence of a special token's text (the
engine's own list: llama.cpp's CONTROL and USER_DEFINED tokens, the Hugging Face tokenizer's
added tokens for vLLM) gets a zero-width space after its first character, so it tokenizes as
ordinary text and reads the same. The prompts' own text holds no special token, so nothing
of ours is changed."""

from __future__ import annotations

import re
from collections.abc import Iterable

from serve_app.generation.base import Message

BREAK = "\u200b"


class SpecialTokenGuard:
    def __init__(self, tokens: Iterable[str]) -> None:
        self.tokens = tuple(sorted({t for t in tokens if len(t) > 1}, key=len, reverse=True))
        self._pattern = (
            re.compile("|".join(re.escape(t) for t in self.tokens)) if self.tokens else None
        )

    def neutralise(self, text: str) -> str:
        """``text`` with no special token's text left in it (see the module docstring)."""
        if self._pattern is None:
            return text
        while True:  # overlapping occurrences: the next pass breaks what the first left
            rewritten = self._pattern.sub(lambda m: m.group()[0] + BREAK + m.group()[1:], text)
            if rewritten == text:
                return text
            text = rewritten

    def messages(self, messages: list[Message]) -> list[Message]:
        return [Message(m.role, self.neutralise(m.content)) for m in messages]
