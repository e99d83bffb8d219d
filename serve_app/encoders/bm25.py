"""BM25 as a sparse vector: term-frequency weights here, IDF applied by the store at query time.

The tokenizer (lowercasing, English stop words, Snowball stemming) and the TF saturation
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avg_len))`` are Qdrant's own BM25 model,
so the embedded engine and a Qdrant server (``Modifier.IDF``) score identically.
"""

from __future__ import annotations

import qdrant_edge as edge

from serve_app.config import Bm25Config
from serve_app.schemas import SparseVector


def bm25_model_id(config: Bm25Config) -> str:
    """The parameters that shape the document weights, as the index records them."""
    return f"bm25(k1={config.k1},b={config.b},avg_len={config.avg_len},{config.language})"


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
