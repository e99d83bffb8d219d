"""Whether a cited claim says the opposite of its passage: the check that word overlap
(``citations.support_score``) cannot make, as "X does not reduce Y" shares every content word
with "X reduces Y".

The claim is aligned with the passage's clause that shares the most content words with it
(at least ``MIN_SHARED``; with fewer, nothing is judged). Against that clause it is a
contradiction when

- one of the two is negated and the other is not (``not``, ``no``, ``never``, ``n't``,
  ``without``, ``fail(s/ed) to``, ...);
- the claim states a number the passage does not hold anywhere while the clause states
  another (25 % where the passage says 75 %);
- the claim moves in one direction where the clause moves in the other (increase/decrease,
  higher/lower, more/less, improves/worsens, ...), the clause not saying the claim's word too.

Lexical and deterministic, as the support score is: it catches flips of stance written with
these words, not a contradiction that needs reading (a paraphrase with other verbs, a
different population). What it measured: docs/answers.md ("Contradictions")."""

from __future__ import annotations

import re

from serve_app.generation.sentences import sentences

MIN_SHARED = 2

_WORD = re.compile(r"[A-Za-z]+(?:n't)?|\d+(?:[.,]\d+)?")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")
_CLAUSE = re.compile(r"[,;:]\s+|\s+(?:but|while|whereas|although|though|however)\s+", re.I)
_NEGATIONS_TEXT = (
    "not no never neither nor none nothing cannot without lack lacks lacked absent "
    "unable fail fails failed failure"
)
_NEGATIONS = frozenset(_NEGATIONS_TEXT.split())
# Opposite directions, by word start (a prefix covers increase/increased/increases/...).
_OPPOSITES = (
    ("increas", "decreas"),
    ("increas", "reduc"),
    ("increas", "lower"),
    ("higher", "lower"),
    ("more", "less"),
    ("more", "fewer"),
    ("greater", "smaller"),
    ("greater", "lesser"),
    ("larger", "smaller"),
    ("longer", "shorter"),
    ("improv", "worsen"),
    ("improv", "impair"),
    ("enhanc", "impair"),
    ("enhanc", "reduc"),
    ("rais", "lower"),
    ("rise", "fall"),
    ("gain", "loss"),
    ("above", "below"),
    ("promot", "inhibit"),
    ("promot", "suppress"),
    ("activat", "inhibit"),
    ("induc", "suppress"),
    ("stimulat", "inhibit"),
    ("upregulat", "downregulat"),
    ("positive", "negative"),
    ("benefi", "harm"),
    ("strong", "weak"),
    ("accelerat", "slow"),
    ("elevat", "reduc"),
)
_STOP_TEXT = (
    "the a an and or of in on at to for from by with as is are was were be been it its this "
    "that these those which who than then there their they also can could may might will "
    "would should do does did has have had into between during within"
)
_STOP = frozenset(_STOP_TEXT.split())


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _content(words: list[str]) -> set[str]:
    return {w for w in words if w not in _STOP and w not in _NEGATIONS and len(w) > 2}


def _negated(words: list[str]) -> bool:
    return any(w in _NEGATIONS or w.endswith("n't") for w in words)


def _numbers(text: str) -> set[str]:
    return {n.rstrip("0").rstrip(".") if "." in n else n for n in _NUMBER.findall(text)}


def _has(words: list[str], prefix: str) -> bool:
    return any(w.startswith(prefix) for w in words)


def clauses(text: str) -> list[str]:
    """The sentences of ``text`` and, for those that have several, their clauses (split at
    commas, semicolons, colons and contrasting conjunctions)."""
    found = []
    for start, end in sentences(text):
        sentence = text[start:end]
        parts = [c for c in _CLAUSE.split(sentence) if c.strip()]
        found += [sentence, *parts] if len(parts) > 1 else [sentence]
    return found


def contradiction(claim: str, passage: str) -> str | None:
    """Why ``claim`` contradicts ``passage`` (module docstring), or None."""
    said = _words(claim)
    claimed = _content(said)
    if len(claimed) < MIN_SHARED:
        return None
    # The passage's sentence or clause closest to the claim (Jaccard of content words: a
    # claim that restates a whole sentence aligns with the sentence, one that restates a
    # clause with the clause).
    best, shared, closest = "", 0, 0.0
    for candidate in clauses(passage):
        words = _content(_words(candidate))
        overlap = len(claimed & words)
        similarity = overlap / len(claimed | words) if words else 0.0
        if similarity > closest:
            best, shared, closest = candidate, overlap, similarity
    if shared < MIN_SHARED:
        return None
    aligned = _words(best)
    if _negated(said) != _negated(aligned):
        which = "the claim" if _negated(said) else "the passage"
        return f"negation: {which} is negated where the other is not ({best.strip()!r})"
    passage_numbers, claim_numbers = _numbers(passage), _numbers(claim)
    if (claim_numbers - passage_numbers) and _numbers(best):
        missing = sorted(claim_numbers - passage_numbers)
        return (
            f"number: the claim says {', '.join(missing)} where the passage says {best.strip()!r}"
        )
    for a, b in _OPPOSITES:
        for mine, theirs in ((a, b), (b, a)):
            flipped = _has(said, mine) and not _has(said, theirs)
            if flipped and _has(aligned, theirs) and not _has(aligned, mine):
                return f"direction: the claim says {mine}... where the passage says {theirs}..."
    return None
