"""IR metrics from ir-measures (trec_eval through its pytrec_eval provider), and TREC run files.

``evaluate_run`` scores ranked lists with nDCG@10, Recall@100 and MRR@10 as trec_eval
computes them (``ndcg_cut_10``: linear gain ``rel / log2(rank + 1)``; ``recall_100``;
``recip_rank`` of the first ten documents). Queries of the qrels missing from the run count 0 (trec_eval
would leave them out of the mean).

trec_eval orders a query's documents by score (a 32-bit float) and breaks ties by document
id, not by the order a system returned them; ``run_scores`` therefore makes each list's
scores strictly decreasing in float32 (a tie is lowered to the float32 just below its
predecessor), so trec_eval, ranx or any tool reading a run file ranks exactly what the system
ranked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from serve_app.errors import ServeAppError

METRICS = ("ndcg@10", "recall@100", "mrr@10")

Ranked = Sequence[tuple[str, float]]


def _measures() -> dict:
    try:
        import ir_measures
    except ImportError:
        raise ServeAppError(
            "the evaluation metrics need ir-measures: pip install 'serve-app[bench]'"
        ) from None
    return {
        "ndcg@10": ir_measures.nDCG @ 10,
        "recall@100": ir_measures.R @ 100,
        "mrr@10": ir_measures.RR @ 10,
    }


def run_scores(ranked: Ranked) -> dict[str, float]:
    """One query's ranked (doc id, score) list as strictly decreasing scores, in list order.

    trec_eval holds scores as 32-bit floats, so the scores are rounded to float32 and a tie
    (or an inversion) becomes the float32 just below its predecessor. A document listed twice
    keeps its first (best) position."""
    out: dict[str, float] = {}
    previous = np.float32(np.inf)
    lowest = np.float32(-np.inf)
    for doc, score in ranked:
        if doc in out:
            continue
        value = np.float32(score)
        if value >= previous:
            value = np.nextafter(previous, lowest)
        out[doc] = float(value)
        previous = value
    return out


def per_query(
    run: Mapping[str, Ranked], qrels: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, float]]:
    """metric -> query id -> value, for every query of ``qrels`` (0 where the run has none)."""
    import ir_measures

    measures = _measures()
    by_measure = {str(m): name for name, m in measures.items()}
    out = {name: dict.fromkeys(qrels, 0.0) for name in measures}
    scored = {q: run_scores(run[q]) for q in qrels if run.get(q)}
    if not scored:
        return out
    provider = ir_measures.providers.registry["pytrec_eval"]
    judged = {q: dict(qrels[q]) for q in qrels}
    # trec_eval's recip_rank has no cutoff (the provider ignores RR's @10): it is computed on
    # each query's first ten documents, which the strictly decreasing scores keep in order.
    top10 = {q: dict(list(docs.items())[:10]) for q, docs in scored.items()}
    for measure, ranked in (
        ([measures["ndcg@10"], measures["recall@100"]], scored),
        ([measures["mrr@10"]], top10),
    ):
        for metric in provider.evaluator(measure, judged).iter_calc(ranked):
            out[by_measure[str(metric.measure)]][metric.query_id] = float(metric.value)
    return out


def evaluate_run(
    run: Mapping[str, Ranked], qrels: Mapping[str, Mapping[str, int]]
) -> dict[str, float]:
    """Mean nDCG@10, Recall@100 and MRR@10 over the judged queries, to 4 decimals."""
    values = per_query(run, qrels)
    n = max(1, len(qrels))
    return {name: round(sum(values[name].values()) / n, 4) for name in METRICS}


def write_trec_run(path: Path, run: Mapping[str, Ranked], tag: str) -> None:
    """A TREC run file (``qid Q0 docid rank score tag``), scores as ``run_scores`` makes them
    (``repr`` of the float, so reading it back gives the same ranking)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for query_id in sorted(run):
            for rank, (doc, score) in enumerate(run_scores(run[query_id]).items(), 1):
                handle.write(f"{query_id} Q0 {doc} {rank} {score!r} {tag}\n")


def read_trec_run(path: Path) -> dict[str, list[tuple[str, float]]]:
    """A TREC run file as query id -> [(doc id, score)] in file order (gzip if ``.gz``)."""
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    run: dict[str, list[tuple[str, float]]] = {}
    with opener(path, "rt") as handle:
        for line in handle:
            parts = line.split()
            if len(parts) == 6:
                run.setdefault(parts[0], []).append((parts[2], float(parts[4])))
    return run
