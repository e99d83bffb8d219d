"""IR metrics over one ranked list of document ids and graded relevance judgements."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def ndcg_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k with linear gain (``rel / log2(rank + 1)``), as in BEIR / pytrec_eval."""
    dcg = sum(relevant.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]))
    ideal = sorted((r for r in relevant.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return 0.0 if idcg == 0 else dcg / idcg


def recall_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 100) -> float:
    positives = {doc for doc, r in relevant.items() if r > 0}
    if not positives:
        return 0.0
    return len(positives.intersection(ranked[:k])) / len(positives)


def mrr_at_k(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 10) -> float:
    for i, doc in enumerate(ranked[:k]):
        if relevant.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def evaluate_run(
    run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]
) -> dict[str, float]:
    """Mean nDCG@10, Recall@100 and MRR@10 over the judged queries (missing runs count 0)."""
    totals = {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    for query_id, relevant in qrels.items():
        ranked = run.get(query_id, [])
        totals["ndcg@10"] += ndcg_at_k(ranked, relevant, 10)
        totals["recall@100"] += recall_at_k(ranked, relevant, 100)
        totals["mrr@10"] += mrr_at_k(ranked, relevant, 10)
    n = max(1, len(qrels))
    return {name: round(value / n, 4) for name, value in totals.items()}
