"""Sentence splitting for answers and passages: a stop after a common abbreviation ("et al.",
"e.g.", "Fig.") or an initial ends no sentence; citation marks after a stop belong to the
sentence before it."""

from __future__ import annotations

import re

# The prompt's citation form: [1], [1, 2], [1-3], [1–3], [Passage 1], [Passages 1 and 2].
CITATION = r"\[\s*(?:passages?\s*)?\d+(?:\s*(?:[,;]|[-–—]|and)\s*(?:passages?\s*)?\d+)*\s*\]"

# A sentence ends at . ! ? (closing quotes or brackets may follow, then citation marks, then
# space) or at a line break; the marks belong to the sentence before ("... risk. [2] Next").
_SENTENCE_END = re.compile(rf"[.!?][\"'”’)\]]*(?:\s*{CITATION})*\s+|\n+", re.IGNORECASE)
_ABBREVIATIONS_TEXT = (
    "al. e.g. i.e. eg. ie. cf. vs. fig. figs. eq. eqs. ref. refs. no. nos. vol. pp. approx. "
    "ca. resp. incl. dr. mr. mrs. ms. prof. st. sp. spp. et. seq."
)
_ABBREVIATIONS = frozenset(_ABBREVIATIONS_TEXT.split())
_ENDS_ONLY_BEFORE_A_CAPITAL = frozenset({"etc."})
_INITIAL = re.compile(r"^\(?[A-Z]\.$")  # "J. Smith"


def _is_sentence_end(text: str, stop: int, after: int) -> bool:
    """Whether the ``.`` at ``stop`` ends a sentence (``after``: where the next one starts)."""
    if text[stop] != ".":
        return True
    word = text[: stop + 1].rsplit(None, 1)[-1]
    if _INITIAL.match(word):
        return False
    word = word.lower().lstrip("([\"'")
    if word in _ABBREVIATIONS or re.fullmatch(r"(?:[a-z]\.){2,}", word):
        return False
    if word in _ENDS_ONLY_BEFORE_A_CAPITAL:
        return after < len(text) and text[after].isupper()
    return True


def sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the sentences of ``text``, blank ones left out; a stop
    after a common abbreviation ("et al.", "e.g.", "Fig.") or an initial ends none."""
    spans = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        if match.group().startswith("\n") or _is_sentence_end(text, match.start(), match.end()):
            end = match.start() + len(match.group().rstrip())
            spans.append((start, end))
            start = match.end()
    spans.append((start, len(text)))
    return [(s, e) for s, e in spans if text[s:e].strip()]
