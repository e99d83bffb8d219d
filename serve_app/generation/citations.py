"""Citations in an answer: each ``[n]`` (also ``[n, m]``, ``[n-m]``, ``[n–m]``,
``[Passage n]``) mapped to its passage (document, section, the character offsets and text the
prompt held) with the answer span it supports and a support score; every other bracketed
number is reported as invalid, and sentences without a valid citation, or whose citations all
lack support, are flagged.

Support (``support_score``, the citation's ``support``) is word overlap, not entailment: the
share of the span's content words (lower-cased, stop words left out, a plural ``s`` and
``ed``/``ing`` endings stripped, citation marks not counted) that occur in the passage text.
A citation is ``supported`` when that share is ``SUPPORTED`` (0.5) or more and the span does
not contradict the passage (``stance.contradiction``: a negation, a number or a direction
flipped against the passage's clause it aligns with; the reason in ``contradiction``).
Lexical and deterministic: a paraphrase scores low, a sentence that copies the passage's
words scores high, and a copy with its stance flipped is caught only when the flip is written
with the words ``stance`` knows."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from serve_app.generation.prompts import Passage
from serve_app.generation.sentences import CITATION, sentences
from serve_app.generation.stance import contradiction

SUPPORTED = 0.5
MAX_RANGE = 50

_DASH = "-–—"
# Parenthesised numbers: "(2)", "(ref 3, 4)" (a document's mark as the prompt rewrote it).
_PARENTHESISED = rf"\((?:ref\s+)?\d+(?:\s*[,;{_DASH}]\s*\d+)*\)"
# Any other bracketed text holding a number: "[5a]", "[ref 3]", "[Fig 2]".
_OTHER_BRACKET = r"\[[^\[\]\n]{0,24}\d[^\[\]\n]{0,24}\]"
MARK = re.compile(
    f"(?P<citation>{CITATION})|(?P<paren>{_PARENTHESISED})|(?P<other>{_OTHER_BRACKET})",
    re.IGNORECASE,
)
_CITATION_MARKS = re.compile(rf"\s*{CITATION}", re.IGNORECASE)
_ITEM = re.compile(rf"(\d+)(?:\s*[{_DASH}]\s*(?:passages?\s*)?(\d+))?", re.IGNORECASE)
_NUMBER = re.compile(r"\d+")

_WORD = re.compile(r"\w+")
_STOP_WORDS_TEXT = (
    "the a an and or but of in on at to for from by with as is are was were be been being "
    "it its this that these those there their they them than then which who whom whose what "
    "when where how not no nor so such also can could may might will would shall should do "
    "does did has have had into onto over under about after before between during within "
    "without more most less least very much many some any all each both other only same "
    "passage passages found find finds show shows showed shown report reported"
)
_STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())


@dataclass
class CitationReport:
    citations: list[dict[str, Any]] = field(default_factory=list)
    invalid: list[dict[str, Any]] = field(default_factory=list)
    uncited_sentences: list[dict[str, Any]] = field(default_factory=list)
    unsupported_sentences: list[dict[str, Any]] = field(default_factory=list)

    @property
    def cited_documents(self) -> list[str]:
        return list(dict.fromkeys(c["doc_id"] for c in self.citations))

    def as_dict(self) -> dict[str, Any]:
        return {
            "citations": self.citations,
            "invalid_citations": self.invalid,
            "uncited_sentences": self.uncited_sentences,
            "unsupported_sentences": self.unsupported_sentences,
            "cited_documents": self.cited_documents,
        }


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_words(text: str) -> set[str]:
    return {
        _stem(word)
        for word in (w.lower() for w in _WORD.findall(text))
        if word not in _STOP_WORDS and (len(word) > 2 or word.isdigit())
    }


def support_score(span: str, passage_text: str) -> float:
    """The share of ``span``'s content words found in ``passage_text`` (module docstring);
    1.0 for a span without content words."""
    claimed = content_words(span)
    if not claimed:
        return 1.0
    return round(len(claimed & content_words(passage_text)) / len(claimed), 4)


def supporting_span(claim: str, passage_text: str) -> tuple[int, int]:
    """The sentence of ``passage_text`` (start, end) that holds the most of ``claim``'s
    content words, the first of equals; the whole text when it has no sentence."""
    wanted = content_words(claim)
    best, shared = (0, len(passage_text)), -1
    for start, end in sentences(passage_text):
        found = len(wanted & content_words(passage_text[start:end]))
        if found > shared:
            best, shared = (start, end), found
    return best


def _numbers(mark: str) -> list[int] | str:
    """The passage numbers a citation mark names, or why it names none."""
    numbers: list[int] = []
    for low, high in _ITEM.findall(mark):
        first, last = int(low), int(high or low)
        if last < first:
            return "not a citation: a range must run upwards"
        if last - first > MAX_RANGE:
            return f"not a citation: a range of more than {MAX_RANGE} passages"
        numbers.extend(range(first, last + 1))
    return numbers


def _claim_end(sentence: str) -> int:
    """Where the sentence's own words end: before trailing marks, spaces and the stop."""
    end = len(sentence)
    while True:
        trimmed = sentence[:end].rstrip().rstrip(".!?\"'”’")
        tail = re.search(rf"(?:{MARK.pattern})\s*$", trimmed, re.IGNORECASE)
        if tail:
            trimmed = trimmed[: tail.start()]
        trimmed = trimmed.rstrip()
        if len(trimmed) == end:
            return end
        end = len(trimmed)


def claim_text(span: str) -> str:
    """A span's own words: every mark (a citation, a document's reference) left out."""
    return MARK.sub(" ", span)


def check_citations(answer: str, passages: list[Passage]) -> CitationReport:
    """Every citation of ``answer`` with its passage and answer span (``start``/``end``: the
    clause it closes, from the sentence's start or the previous citation mark to this one, the
    marks' own text left out of what is compared; ``span_start``/``span_end``: the sentence of
    the passage's ``text`` that shares most of its words), or in ``invalid`` with the reason; each
    sentence of at least three words that cites no valid passage is flagged as uncited, each
    whose valid citations all lack support (or contradict their passage) as unsupported
    (``start``/``end``: the sentence in ``answer``, ``text``: its words less citation marks)."""
    by_number = {p.number: p for p in passages}
    report = CitationReport()
    for index, (start, end) in enumerate(sentences(answer)):
        sentence = answer[start:end]
        claim_end = start + _claim_end(sentence)
        cited: list[dict[str, Any]] = []
        clause_start, clause = start, (start, claim_end)
        for mark in MARK.finditer(sentence):
            if mark.group("citation") is not None:
                # The clause this citation closes; marks in a row ("[1][2]") share one.
                until = min(start + mark.start(), claim_end)
                text = answer[clause_start:until]
                if content_words(claim_text(text)):
                    left = len(text) - len(text.lstrip(" ,;:"))
                    clause = (clause_start + left, clause_start + len(text.rstrip(" ,;:")))
                clause_start = start + mark.end()
            where = {"sentence": index, "at": start + mark.start(), "mark": mark.group()}
            if mark.group("citation") is None:
                numbers = [int(n) for n in _NUMBER.findall(mark.group())]
                if mark.group().lower().startswith("(ref"):
                    report.invalid.append({**where, "reason": "a document's reference mark"})
                elif mark.group("other") or all(n in by_number for n in numbers):
                    report.invalid.append(
                        {**where, "reason": "not a citation: passages are cited as [n]"}
                    )
                continue  # "(2019)", "(n = 30)": not a citation and not meant as one
            numbers_or_reason = _numbers(mark.group())
            if isinstance(numbers_or_reason, str):
                report.invalid.append({**where, "reason": numbers_or_reason})
                continue
            for number in numbers_or_reason:
                passage = by_number.get(number)
                if passage is None:
                    report.invalid.append(
                        {**where, "number": number, "reason": "no passage has this number"}
                    )
                    continue
                claim = claim_text(answer[clause[0] : clause[1]])
                support = support_score(claim, passage.text)
                span_start, span_end = supporting_span(claim, passage.text)
                contradicts = contradiction(claim, passage.text)
                chunk = passage.chunk
                cited.append(
                    {
                        **where,
                        "number": number,
                        "start": clause[0],
                        "end": clause[1],
                        "doc_id": chunk.doc_id,
                        "chunk_id": chunk.id,
                        "title": chunk.title,
                        "section": chunk.section,
                        "char_start": passage.char_start,
                        "char_end": passage.char_end,
                        "text": passage.text,
                        "span_start": span_start,
                        "span_end": span_end,
                        "support": support,
                        "contradiction": contradicts,
                        "supported": support >= SUPPORTED and contradicts is None,
                    }
                )
        report.citations.extend(cited)
        words = _CITATION_MARKS.sub("", sentence).strip()
        flagged = {"sentence": index, "start": start, "end": end, "text": words}
        if not cited and len(_WORD.findall(words)) >= 3:
            report.uncited_sentences.append(flagged)
        elif cited and not any(c["supported"] for c in cited):
            report.unsupported_sentences.append(flagged)
    return report
