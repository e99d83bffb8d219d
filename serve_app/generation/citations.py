"""Citations in an answer: each ``[n]`` mapped to its passage's chunk (document, section,
character offsets) and checked (the number names a passage); sentences without a valid
citation are flagged."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from serve_app.generation.prompts import Passage

_MARK = re.compile(r"\[(\d+(?:\s*[,;]\s*\d+)*)\]")
# A sentence ends at . ! ? (then space) or at a line break; citation marks right after the
# stop belong to the sentence before ("... risk. [2] Next").
_SENTENCE_END = re.compile(r"(?<=[.!?])(?:\s*\[\d+(?:\s*[,;]\s*\d+)*\])*\s+|\n+")
_WORD = re.compile(r"\w+")


@dataclass
class CitationReport:
    citations: list[dict[str, Any]] = field(default_factory=list)
    invalid: list[dict[str, Any]] = field(default_factory=list)
    uncited_sentences: list[dict[str, Any]] = field(default_factory=list)

    @property
    def cited_documents(self) -> list[str]:
        return list(dict.fromkeys(c["doc_id"] for c in self.citations))

    def as_dict(self) -> dict[str, Any]:
        return {
            "citations": self.citations,
            "invalid_citations": self.invalid,
            "uncited_sentences": self.uncited_sentences,
            "cited_documents": self.cited_documents,
        }


def sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the sentences of ``text``, blank ones left out."""
    spans = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.start() + len(text[match.start() : match.end()].rstrip())
        spans.append((start, end))
        start = match.end()
    spans.append((start, len(text)))
    return [(s, e) for s, e in spans if text[s:e].strip()]


def check_citations(answer: str, passages: list[Passage]) -> CitationReport:
    """Every citation of ``answer`` with its chunk, or in ``invalid`` when no passage has its
    number; each sentence of at least three words that cites no valid passage is flagged."""
    by_number = {p.number: p for p in passages}
    report = CitationReport()
    for index, (start, end) in enumerate(sentences(answer)):
        sentence = answer[start:end]
        valid = 0
        for mark in _MARK.finditer(sentence):
            for number in (int(n) for n in re.split(r"\s*[,;]\s*", mark.group(1))):
                where = {"number": number, "sentence": index, "at": start + mark.start()}
                passage = by_number.get(number)
                if passage is None:
                    report.invalid.append({**where, "reason": "no passage has this number"})
                    continue
                valid += 1
                chunk = passage.chunk
                report.citations.append(
                    {
                        **where,
                        "doc_id": chunk.doc_id,
                        "chunk_id": chunk.id,
                        "title": chunk.title,
                        "section": chunk.section,
                        "char_start": chunk.char_start,
                        "char_end": chunk.char_end,
                    }
                )
        text = _MARK.sub("", sentence).strip()
        if not valid and len(_WORD.findall(text)) >= 3:
            report.uncited_sentences.append({"sentence": index, "start": start, "text": text})
    return report
