"""The contradiction set: SciFact abstract sentences cited against their abstract, as written
and with their stance flipped (negated, a number changed, a direction reversed), scored by the
citation check the answers use (``serve_app.generation.citations``).

What it reports, per form: how often the citation counts as supported by word overlap alone
(the rule before the stance check: ``support >= 0.5``) and with the stance check
(``supported``), and for the flipped forms how often the check names the flip. A flipped
sentence scored as supported is a contradiction the answer would present as backed by its
passage; a true sentence flagged is a false alarm.

The flips are made by rules (an auxiliary negated or its negation removed, the first number
changed, a direction word swapped for its opposite), so they are flips of the kind the check
looks for: the figures say how well the check aligns a claim with its passage's clause and
keeps quiet on true sentences, not how it fares on contradictions written another way.

    python -m benchmarks answers --suites contradictions [--claims N]
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from benchmarks.report import table
from serve_app.generation.citations import SUPPORTED, check_citations
from serve_app.generation.prompts import Passage
from serve_app.generation.sentences import sentences
from serve_app.schemas import Chunk

_AUXILIARY = re.compile(
    r"\b(is|are|was|were|does|do|did|can|could|may|might|will|would|has|have|had)\b"
)
_NEGATED = re.compile(
    r"\b(is|are|was|were|does|do|did|can|could|may|might|will|would|has|have|had) not\b"
)
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w])")
_CLAUSE = re.compile(r"[,;:]\s+|\s+(?:but|while|whereas|although|though)\s+")
_DIRECTIONS = (
    ("increased", "decreased"),
    ("increases", "decreases"),
    ("increase", "decrease"),
    ("higher", "lower"),
    ("greater", "smaller"),
    ("improved", "worsened"),
    ("reduced", "increased"),
    ("reduces", "increases"),
    ("promotes", "inhibits"),
    ("enhanced", "impaired"),
    ("positive", "negative"),
    ("more", "less"),
)


def negated(sentence: str) -> str | None:
    """The sentence with its first auxiliary negated, or its first negation removed."""
    if _NEGATED.search(sentence):
        return _NEGATED.sub(lambda m: m.group(1), sentence, count=1)
    if _AUXILIARY.search(sentence):
        return _AUXILIARY.sub(lambda m: f"{m.group(1)} not", sentence, count=1)
    return None


def number_changed(sentence: str) -> str | None:
    """The sentence with its first number changed (a percentage to its complement)."""
    match = _NUMBER.search(sentence)
    if match is None:
        return None
    value = float(match.group(1))
    after = sentence[match.end() : match.end() + 2]
    new = 100 - value if "%" in after and 0 < value < 100 and value != 50 else value * 3 + 7
    text = f"{new:g}"
    return sentence[: match.start()] + text + sentence[match.end() :]


def direction_reversed(sentence: str) -> str | None:
    for a, b in _DIRECTIONS:
        for word, opposite in ((a, b), (b, a)):
            found = re.search(rf"\b{word}\b", sentence, re.IGNORECASE)
            if found:
                return sentence[: found.start()] + opposite + sentence[found.end() :]
    return None


FLIPS = {"negated": negated, "number": number_changed, "direction": direction_reversed}


def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    """The 95 % Wilson interval of k successes in n trials."""
    if n == 0:
        return [0.0, 1.0]
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 3), round(min(1.0, centre + half), 3)]


def cases(corpus: Path, limit: int) -> list[tuple[str, str, str]]:
    """(form, claim, abstract) for the first ``limit`` abstracts with a usable sentence: its
    true form and each flip that applies."""
    found: list[tuple[str, str, str]] = []
    used = 0
    with (corpus / "corpus.jsonl").open() as lines:
        for line in lines:
            if used >= limit:
                break
            text = json.loads(line)["text"]
            spans = [text[s:e] for s, e in sentences(text)]
            usable = [s for s in spans[1:] if 8 <= len(s.split()) <= 40] or spans[:1]
            if not usable:
                continue
            sentence = usable[0]
            used += 1
            found.append(("true", sentence, text))
            parts = [p for p in _CLAUSE.split(sentence) if len(p.split()) >= 5]
            if len(parts) > 1:  # a true claim that restates part of a sentence
                found.append(("true clause", max(parts, key=len), text))
            for name, flip in FLIPS.items():
                changed = flip(sentence)
                if changed and changed != sentence:
                    found.append((name, changed, text))
    return found


def measure(corpus: Path, limit: int) -> dict[str, Any]:
    counts: dict[str, dict[str, int]] = {}
    examples: dict[str, str] = {}
    for form, claim, abstract in cases(corpus, limit):
        chunk = Chunk(id="c", doc_id="d", text=abstract, order=0, char_start=0,
                      char_end=len(abstract))  # fmt: skip
        passage = Passage(1, chunk)
        citation = check_citations(claim.rstrip(".") + " [1].", [passage]).citations
        tally = counts.setdefault(form, {"n": 0, "overlap": 0, "supported": 0, "named": 0})
        tally["n"] += 1
        if not citation:
            continue
        tally["overlap"] += citation[0]["support"] >= SUPPORTED
        tally["supported"] += citation[0]["supported"]
        tally["named"] += citation[0]["contradiction"] is not None
        if citation[0]["contradiction"] and form not in examples:
            examples[form] = f"{claim} -> {citation[0]['contradiction']}"
    figures = {
        form: {
            **c,
            "overlap_rate": round(c["overlap"] / c["n"], 3),
            "overlap_ci": wilson(c["overlap"], c["n"]),
            "supported_rate": round(c["supported"] / c["n"], 3),
            "supported_ci": wilson(c["supported"], c["n"]),
        }
        for form, c in counts.items()
    }
    return {"abstracts": limit, "forms": figures, "examples": examples}


def markdown(figures: dict[str, Any]) -> list[str]:
    rows = [
        [
            form,
            f["n"],
            f"{f['overlap_rate']:.3f} {f['overlap_ci']}",
            f"{f['supported_rate']:.3f} {f['supported_ci']}",
            f["named"],
        ]
        for form, f in figures["forms"].items()
    ]
    return [
        "## Contradictions",
        "",
        f"One sentence of each of {figures['abstracts']} SciFact abstracts cited against its "
        "abstract, as written (`true`) and flipped by rule; the share scored as supported by "
        "word overlap alone (the rule before the stance check) and with it, 95 % Wilson "
        "intervals. For the flipped forms both are contradictions scored as support; for "
        "`true` (the sentence) and `true clause` (its longest clause alone), 1 minus the "
        "second is the false-alarm rate.",
        "",
        *table(
            ["form", "n", "supported by overlap", "supported with the stance check", "named"],
            rows,
        ),
        "",
        *[f"- {form}: {example}" for form, example in figures["examples"].items()],
        "",
    ]
