"""Control text in untrusted text removed before the chat template sees it.

llama.cpp's server and vLLM tokenize a templated chat prompt with special tokens parsed: the
text ``<|im_end|>`` inside a passage, a title or a question would become the real
end-of-turn token and let a document speak as the system. Breaking the token's text (a
zero-width space inside it) keeps the ids plain, yet the 1.5B model still reads
``<|im_start|>system`` followed by an order as a role switch and obeys it (the canary suite
before benchmarks/injection.py: 4 of 10). So every message's content is rewritten: each special token's text
(the engine's own list: llama.cpp's CONTROL and USER_DEFINED tokens, the Hugging Face
tokenizer's added tokens for vLLM), together with the turn it opens, becomes the visible
marker ``[removed control text]``. A token's turn is the role name after it (``system``,
``user``...) and the rest of that line, or, when the token ends its line, the next line (up
to the next special token): the header and first line of a turn a document tried to open.
A run of such pieces separated only by white space is one marker. A token in the middle of
prose (``the <|im_start|> token``) loses only itself. Text before a token, or a turn's
second line, stays: that is a plain-text order, left to the prompt's own defences.

The marker holds no special token and sits between whatever was around the removed text, so
the rewrite cannot form a new token from the pieces of an overlapping one. The prompts' own
text holds no special token, so nothing of ours is changed."""

from __future__ import annotations

import re
from collections.abc import Iterable

from serve_app.generation.base import Message

MARKER = "[removed control text]"
# The role names chat templates put after a turn's opening token (ChatML, Llama 3, Mistral
# tool turns...): a document's "<|im_start|>system" is a turn header, its role included.
ROLES = ("system", "user", "assistant", "tool", "developer", "ipython", "function")


class SpecialTokenGuard:
    def __init__(self, tokens: Iterable[str]) -> None:
        self.tokens = tuple(sorted({t for t in tokens if len(t) > 1}, key=len, reverse=True))
        self._pattern = _control_text(self.tokens) if self.tokens else None

    def neutralise(self, text: str) -> str:
        """``text`` with no special token's text left in it, each token and the turn it
        opens replaced by ``MARKER`` (see the module docstring)."""
        if self._pattern is None:
            return text
        return self._pattern.sub(MARKER, text)

    def messages(self, messages: list[Message]) -> list[Message]:
        return [Message(m.role, self.neutralise(m.content)) for m in messages]


def _control_text(tokens: tuple[str, ...]) -> re.Pattern[str]:
    token = "(?:" + "|".join(re.escape(t) for t in tokens) + ")"
    rest_of_line = rf"(?:(?!{token})[^\n])*"
    roles = "|".join(ROLES)
    piece = (
        rf"{token}(?:"
        rf"[ \t]*(?i:{roles})\b[ \t]*\r?\n?{rest_of_line}"  # a turn header and its first line
        rf"|[ \t]*\r?\n{rest_of_line}"  # a token ending its line, and the next line
        r")?"
    )
    return re.compile(rf"{piece}(?:\s*{piece})*")
