"""Write tests/data/reference_vectors.json: outputs of the real small models for fixed inputs.

Run once when a model or its pooling changes on purpose; the encoder tests compare against
it within a cosine tolerance (as text-embeddings-inference does for its backends).
"""

from __future__ import annotations

import json
from pathlib import Path

from serve_app.config import AppConfig
from serve_app.encoders.dense_transformers import TransformersDenseEncoder
from serve_app.encoders.splade import SpladeEncoder

TEXTS = [
    "Hybrid retrieval combines lexical and semantic search.",
    "Mitochondria are the powerhouse of the cell and produce ATP through oxidative phosphorylation.",
]
QUERY = "what produces ATP in cells?"


def main() -> None:
    config = AppConfig()
    dense = TransformersDenseEncoder(config.dense)
    splade = SpladeEncoder(config.splade)
    docs = dense.encode(TEXTS)
    query = dense.encode_queries_sync([QUERY])
    sparse_docs = splade.encode(TEXTS, config.splade.doc_top_k)
    sparse_query = splade.encode([QUERY], config.splade.query_top_k)
    out = {
        "texts": TEXTS,
        "query": QUERY,
        "dense_documents": [[round(float(x), 6) for x in row] for row in docs],
        "dense_query": [round(float(x), 6) for x in query[0]],
        "splade_documents": [v.as_term_weights() for v in sparse_docs],
        "splade_query": sparse_query[0].as_term_weights(),
    }
    path = Path(__file__).resolve().parents[1] / "tests" / "data" / "reference_vectors.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
