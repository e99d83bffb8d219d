"""BM25 as a sparse vector: term-frequency weights here, IDF applied by the store at query time.

The tokenizer (lowercasing, English stop words, Snowball stemming) and the TF saturation
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))`` are Qdrant's own BM25 model,
so the embedded engine and a Qdrant server (``Modifier.IDF``) score identically.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

import qdrant_edge as edge

from serve_app.config import Bm25Config
from serve_app.schemas import SparseVector


def bm25_model_id(config: Bm25Config) -> str:
    """The parameters that shape the document weights, as the index records them."""
    title = f",title_weight={config.title_weight}" if config.title_weight != 1 else ""
    return f"bm25(k1={config.k1},b={config.b},avg_len={config.avg_len}{title},{config.language})"


# With b = 0 and a huge k the engine's saturation ``tf * (k + 1) / (tf + k)`` is tf within
# 1e-4 for any realistic count, so rounding recovers the engine's own term counts.
_COUNTING_K = 1e6


@lru_cache(maxsize=4)
def _counting_model(language: str) -> edge.Bm25:
    return edge.Bm25(edge.Bm25Config(k=_COUNTING_K, b=0.0, avg_len=1.0, language=language))


def term_counts(text: str, language: str = "english") -> dict[int, int]:
    """Term id -> count in ``text``, with the engine's tokenizer (stop words, stemming)."""
    vector = _counting_model(language).embed_document(text)
    return {int(i): round(v) for i, v in zip(vector.indices, vector.values, strict=True)}


def bm25_weights(
    counts: Mapping[int, float], k1: float, b: float, avg_len: float
) -> dict[int, float]:
    """The engine's BM25 document weights from term counts:
    ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))``, ``len`` the sum of the counts.

    Counts may be weighted sums over fields (BM25F: a title counted twice adds 2 per
    occurrence to both tf and len), which is how field weights enter one sparse vector."""
    length = sum(counts.values())
    norm = k1 * (1 - b + b * length / avg_len)
    return {t: tf * (k1 + 1) / (tf + norm) for t, tf in counts.items() if tf > 0}


class Bm25Encoder:
    def __init__(self, config: Bm25Config) -> None:
        self.config = config
        self.model_id = bm25_model_id(config)
        self._model = edge.Bm25(
            edge.Bm25Config(
                k=config.k1, b=config.b, avg_len=config.avg_len, language=config.language
            )
        )

    def encode_documents_sync(self, texts: list[str]) -> list[SparseVector]:
        return [self._convert(self._model.embed_document(t)) for t in texts]

    def encode_queries_sync(self, texts: list[str]) -> list[SparseVector]:
        return [self._convert(self._model.embed_query(t)) for t in texts]

    @staticmethod
    def _convert(vector: edge.SparseVector) -> SparseVector:
        return SparseVector(indices=list(vector.indices), values=[float(v) for v in vector.values])

    # Tokenising is microseconds per text: no thread hop.
    async def encode_documents(self, texts: list[str]) -> list[SparseVector]:
        return self.encode_documents_sync(texts)

    async def encode_queries(self, texts: list[str]) -> list[SparseVector]:
        return self.encode_queries_sync(texts)
