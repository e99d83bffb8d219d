"""``serve-app tune``: search retrieval parameters on one split (train), score the choice once
on another (test) at the end.

Every setting is scored the way ``/v1/search`` answers with no parameters: each strategy's
``candidates`` best chunks, fused at chunk level (``serve_app.fusion.strategies.fuse``), the fused chunks
collapsed to documents in their order, 100 documents a query, nDCG@10 from
``serve_app.evaluation.metrics``. Retrieval is exact and in memory
(``serve_app.evaluation.exact``) over cached encodings (``serve_app.evaluation.encodings``),
so only a new chunking or model length costs model time.

The search is staged, coarse, and greedy; a stage replaces the current setting only with one
that adds at least ``MIN_GAIN`` nDCG@10 on the split, and only with what the service can run
(``Setting.deployable``):

1. chunking (chunk size and overlap, the dense and SPLADE models' length with it, so 512 means
   "the full 512 positions"), judged on the fused default, each strategy alone listed too;
2. per strategy, on its own ranking, at that chunking: BM25 ``k1``/``b``/``avg_len``; title vs
   body (BM25F title weight in one field; two separate fields, measured only); RM3 feedback
   (measured only); SPLADE query pruning;
3. ablation: each per-strategy change switched back under the fused default, dropped when it
   adds less than ``MIN_GAIN`` there (a gain on one ranking need not carry into the fusion);
4. fusion, for the strategies as they now are: method, weights (0 drops a strategy), RRF
   ``k``; then candidates per strategy;
5. chunk -> document aggregation (max, sum of the top n, first chunk) fused at document level,
   measured against the chunk-level fusion the service does.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from serve_app.config import AppConfig
from serve_app.encoders.bm25 import Bm25Encoder
from serve_app.evaluation.aggregation import Aggregation, aggregate
from serve_app.evaluation.beir import BeirDataset
from serve_app.evaluation.encodings import (
    EncodedCorpus,
    EncodedQueries,
    NotEncoded,
    encode_corpus,
    encode_queries,
)
from serve_app.evaluation.exact import (
    Bm25Scorer,
    Bm25Setting,
    Hits,
    Rm3Setting,
    SparseIndex,
    dense_hits,
    rm3_query,
    sparse_top_hits,
)
from serve_app.evaluation.metrics import evaluate_run
from serve_app.fusion.strategies import fuse
from serve_app.schemas import STRATEGIES, FusionMethod, Strategy

log = logging.getLogger(__name__)

RUN_DEPTH = 100
"""Documents per query in every scored run (Recall@100)."""
MIN_GAIN = 0.001
"""nDCG@10 a change must add on the tuning split to replace the current setting: on
SciFact's 809 train claims smaller differences are noise (one query moving one rank moves
the mean by about 0.0004), so the simpler, current setting stays."""
MAX_CANDIDATES = 400
"""Chunks retrieved per strategy once; every candidates setting is a prefix of them."""


@dataclass(frozen=True)
class Grid:
    """The values each stage tries. ``COARSE`` is the search; ``SMOKE`` tries every method
    once or twice (for checking the machinery on a small corpus). Fusion weights are
    relative to dense (1.0); 0 drops a strategy. Candidates start at 100: a search asks each
    strategy for ``max(candidates, top_k)`` chunks, so below 100 the eval's 100-deep default
    run would fuse deeper lists than a top-10 search does."""

    bm25_k1: tuple[float, ...]
    bm25_b: tuple[float, ...]
    title_weights_one: tuple[int, ...]  # integers: the service repeats the header
    title_weights_separate: tuple[float, ...]
    rm3: tuple[Rm3Setting, ...]
    splade_query_terms: tuple[int, ...]
    fusion_methods: tuple[tuple[FusionMethod, int], ...]
    bm25_weights: tuple[float, ...]
    splade_weights: tuple[float, ...]
    candidates: tuple[int, ...]
    aggregations: tuple[tuple[Aggregation, int], ...] = (
        ("max", 1),
        ("sum", 2),
        ("sum", 3),
        ("first", 1),
    )


COARSE = Grid(
    bm25_k1=(0.6, 0.9, 1.2, 1.5, 2.0),
    bm25_b=(0.5, 0.75, 0.9, 1.0),
    title_weights_one=(2, 3),
    title_weights_separate=(0.5, 1.0, 2.0),
    rm3=tuple(Rm3Setting(d, t, a) for d in (5, 10) for t in (10, 20) for a in (0.5, 0.7)),
    splade_query_terms=(8, 16, 32, 64, 128, 256),
    fusion_methods=(
        ("rrf", 10),
        ("rrf", 30),
        ("rrf", 60),
        ("rrf", 100),
        ("weighted", 60),
        ("dbsf", 60),
    ),
    bm25_weights=(0.0, 0.5, 0.75, 1.0, 1.5, 2.0),
    splade_weights=(0.0, 0.25, 0.5, 1.0),
    candidates=(100, 200, 400),
)
SMOKE = Grid(
    bm25_k1=(0.9, 1.2),
    bm25_b=(0.75, 1.0),
    title_weights_one=(2,),
    title_weights_separate=(1.0,),
    rm3=(Rm3Setting(5, 10, 0.5),),
    splade_query_terms=(16, 64),
    fusion_methods=(("rrf", 60), ("weighted", 60), ("dbsf", 60)),
    bm25_weights=(0.0, 1.0),
    splade_weights=(0.0, 1.0),
    candidates=(100, 200),
)
GRIDS = {"coarse": COARSE, "smoke": SMOKE}


@dataclass(frozen=True)
class Chunking:
    """A chunking and the models' input length that goes with it."""

    max_tokens: int
    overlap_tokens: int
    model_length: int

    @property
    def name(self) -> str:
        return f"{self.max_tokens}/{self.overlap_tokens} tokens, models at {self.model_length}"

    def apply(self, config: AppConfig) -> AppConfig:
        return config.model_copy(
            update={
                "chunker": config.chunker.model_copy(
                    update={"max_tokens": self.max_tokens, "overlap_tokens": self.overlap_tokens}
                ),
                "dense": config.dense.model_copy(update={"max_length": self.model_length}),
                "splade": config.splade.model_copy(update={"max_length": self.model_length}),
            }
        )


@dataclass(frozen=True)
class Setting:
    """One retrieval configuration as the tuner scores it."""

    chunking: Chunking
    bm25: Bm25Setting
    rm3: Rm3Setting | None
    splade_query_terms: int
    method: FusionMethod
    k: int
    weights: tuple[tuple[Strategy, float], ...]  # (strategy, weight), 0 drops it
    candidates: int
    aggregation: tuple[Aggregation, int] | None = None  # None: chunk-level fusion (the service)

    @property
    def strategies(self) -> list[Strategy]:
        return [s for s, w in self.weights if w > 0]

    @property
    def deployable(self) -> bool:
        """Whether the service can run it: separate BM25 fields, RM3 and document-level
        aggregation are measured here only (the report says what they gave)."""
        return self.bm25.fields == "one" and self.rm3 is None and self.aggregation is None

    def describe(self) -> dict:
        out = asdict(self)
        out["chunking"] = self.chunking.name
        out["weights"] = dict(self.weights)
        return out


@dataclass
class Workspace:
    """One split's queries and qrels over one chunking's encoded corpus, with cached hits."""

    corpus: EncodedCorpus
    queries: EncodedQueries
    qrels: dict[str, dict[str, int]]
    bm25_queries: list[dict[int, float]]
    # Hits as (chunk rows, scores) arrays: dozens of settings x queries x 400 hits as tuples
    # would take gigabytes.
    hits: dict[tuple, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    _splade: SparseIndex | None = None
    _bm25: dict[Bm25Setting, Bm25Scorer] = field(default_factory=dict)

    def strategy_hits(
        self, strategy: Strategy, setting: Setting, depth: int = MAX_CANDIDATES
    ) -> list[Hits]:
        """Each query's ``depth`` (at most ``MAX_CANDIDATES``) best chunks for one strategy."""
        if strategy == "dense":
            key: tuple = ("dense",)
        elif strategy == "splade":
            key = ("splade", setting.splade_query_terms)
        else:
            key = ("bm25", setting.bm25, setting.rm3)
        if key not in self.hits:
            started = time.perf_counter()
            self.hits[key] = [
                (np.array([c for c, _ in h], dtype=np.int64), np.array([x for _, x in h]))
                for h in self._compute(strategy, setting)
            ]
            log.debug("%s hits in %.1f s", key, time.perf_counter() - started)
        return [
            list(zip(rows[:depth].tolist(), scores[:depth].tolist(), strict=True))
            for rows, scores in self.hits[key]
        ]

    def _compute(self, strategy: Strategy, setting: Setting) -> list[Hits]:
        if strategy == "dense":
            return dense_hits(self.queries.dense, self.corpus.dense, MAX_CANDIDATES)
        if strategy == "splade":
            if self._splade is None:
                self._splade = SparseIndex(self.corpus.splade)
            n = setting.splade_query_terms
            out = []
            for i in range(self.queries.splade.rows):
                terms, values = self.queries.splade.row(i)
                out.append(
                    sparse_top_hits(self._splade.scores(terms[:n], values[:n]), MAX_CANDIDATES)
                )
            return out
        scorer = self._bm25.get(setting.bm25)
        if scorer is None:
            scorer = Bm25Scorer(self.corpus.title_counts, self.corpus.body_counts, setting.bm25)
            self._bm25 = {setting.bm25: scorer}  # one BM25 index in memory at a time
        out = []
        for query in self.bm25_queries:
            hits = sparse_top_hits(scorer.scores(query), MAX_CANDIDATES)
            if setting.rm3 is not None and hits:
                expanded = rm3_query(query, hits, scorer.counts, setting.rm3)
                hits = sparse_top_hits(scorer.scores(expanded), MAX_CANDIDATES)
            out.append(hits)
        return out

    def single_run(
        self, strategy: Strategy, setting: Setting
    ) -> dict[str, list[tuple[str, float]]]:
        doc_ids = self.corpus.doc_ids
        return {
            q: aggregate(((doc_ids[c], 0, s) for c, s in hits), "max")[:RUN_DEPTH]
            for q, hits in zip(self.queries.ids, self.strategy_hits(strategy, setting), strict=True)
        }

    def fused_run(self, setting: Setting) -> dict[str, list[tuple[str, float]]]:
        strategies = setting.strategies
        per = {s: self.strategy_hits(s, setting, setting.candidates) for s in strategies}
        weights = {s: w for s, w in setting.weights if w > 0}
        doc_ids, orders = self.corpus.doc_ids, self.corpus.orders
        run = {}
        for i, query_id in enumerate(self.queries.ids):
            lists = {s: per[s][i] for s in strategies}
            if setting.aggregation is None:
                ranked = {s: [(str(c), score) for c, score in hits] for s, hits in lists.items()}
                fused = fuse(setting.method, ranked, k=setting.k, weights=weights)[:RUN_DEPTH]
                docs = aggregate(((doc_ids[int(c)], 0, s) for c, s in fused), "max")
            else:
                method, n = setting.aggregation
                ranked = {
                    s: aggregate(((doc_ids[c], orders[c], score) for c, score in hits), method, n)
                    for s, hits in lists.items()
                }
                docs = fuse(setting.method, ranked, k=setting.k, weights=weights)[:RUN_DEPTH]
            run[query_id] = docs
        return run

    def score(self, setting: Setting) -> dict[str, float]:
        if len(setting.strategies) == 1:
            return evaluate_run(self.single_run(setting.strategies[0], setting), self.qrels)
        return evaluate_run(self.fused_run(setting), self.qrels)


def bm25_query_terms(config: AppConfig, texts: list[str]) -> list[dict[int, float]]:
    encoder = Bm25Encoder(config.bm25)
    return [dict(zip(v.indices, v.values, strict=True)) for v in encoder.encode_queries_sync(texts)]


@dataclass
class Trial:
    stage: str
    method: str
    setting: Setting
    metrics: dict[str, float] | None  # None: not run (``note`` says why)
    chosen: bool = False
    note: str = ""

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "method": self.method,
            "metrics": self.metrics,
            "chosen": self.chosen,
            "note": self.note,
            "setting": self.setting.describe(),
        }


class Tuner:
    """The staged search (module docstring) over ``chunkings`` on ``dataset``'s split."""

    _single_stages = ("bm25", "bm25-fields", "bm25-rm3", "splade-q", "chunking-single")

    def __init__(
        self,
        config: AppConfig,
        dataset: BeirDataset,
        chunkings: list[Chunking],
        cache_root: Path,
        grid: Grid = COARSE,
        encode: bool = True,
    ) -> None:
        self.grid = grid
        self.encode = encode
        self.config = config
        self.dataset = dataset
        self.chunkings = chunkings
        self.cache_root = cache_root
        self.trials: list[Trial] = []
        self._spaces: dict[tuple[Chunking, int], Workspace] = {}
        self._corpora: dict[Chunking, EncodedCorpus] = {}

    def workspace(self, chunking: Chunking, dataset: BeirDataset | None = None) -> Workspace:
        """The chunking's encoded corpus (kept for the whole run) with ``dataset``'s queries."""
        dataset = dataset or self.dataset
        key = (chunking, id(dataset))
        if key not in self._spaces:
            config = chunking.apply(self.config)
            if chunking not in self._corpora:
                self._corpora[chunking] = encode_corpus(
                    config, dataset, self.cache_root, self.encode
                )
            queries = encode_queries(config, dataset.queries, self.cache_root)
            self._spaces[key] = Workspace(
                self._corpora[chunking],
                queries,
                dataset.qrels,
                bm25_query_terms(config, queries.texts),
            )
        return self._spaces[key]

    def baseline(self) -> Setting:
        c = self.config
        fusion = c.search.fusion
        return Setting(
            chunking=Chunking(c.chunker.max_tokens, c.chunker.overlap_tokens, c.dense.max_length),
            bm25=Bm25Setting(c.bm25.k1, c.bm25.b, c.bm25.avg_len),
            rm3=None,
            splade_query_terms=c.splade.query_top_k,
            method=fusion.method,
            k=fusion.k,
            weights=tuple(
                (s, fusion.weights.get(s, 1.0) if s in c.search.strategies else 0.0)
                for s in STRATEGIES
            ),
            candidates=c.search.candidates,
        )

    def _try(
        self, stage: str, method: str, setting: Setting, strategy: Strategy | None = None
    ) -> float:
        """Scores one setting (``strategy``: that strategy alone); -inf when its vectors are
        not in the cache and the tuner may not encode (the trial is listed as not run)."""
        try:
            space = self.workspace(setting.chunking)
            if strategy is None:
                metrics: dict[str, float] | None = space.score(setting)
            else:
                metrics = evaluate_run(space.single_run(strategy, setting), space.qrels)
        except NotEncoded as missing:
            self.trials.append(Trial(stage, method, setting, None, note=str(missing)))
            log.info("%-10s %-48s not run: %s", stage, method, missing)
            return -math.inf
        assert metrics is not None
        self.trials.append(Trial(stage, method, setting, metrics))
        log.info("%-10s %-48s nDCG@10 %.4f", stage, method, metrics["ndcg@10"])
        return metrics["ndcg@10"]

    def _best(
        self, stage: str, candidates: list[tuple[str, Setting]], strategy: Strategy | None = None
    ) -> Setting:
        """The best-scoring candidate if it beats the first (the current setting) by at least
        ``MIN_GAIN``, else the first; the first when none could be scored."""
        scored = [(self._try(stage, m, s, strategy), i, s) for i, (m, s) in enumerate(candidates)]
        best = max(
            (item for item in scored if item[2].deployable),
            key=lambda item: (item[0], -item[1]),
        )
        if best[0] == -math.inf:
            return candidates[0][1]
        if scored[0][0] > -math.inf and best[0] < scored[0][0] + MIN_GAIN:
            best = scored[0]
        self.trials[len(self.trials) - len(scored) + best[1]].chosen = True
        return best[2]

    def run(self) -> Setting:
        base = self.baseline()
        self._try("baseline", "configuration as it stands", base)
        current = base
        # 1. chunking (with the models' length), judged on the fused default; each strategy
        # alone and BM25 + dense (no SPLADE) are listed too.
        for chunking in self.chunkings:
            variant = replace(current, chunking=chunking)
            for strategy in STRATEGIES:
                self._try("chunking-single", f"{chunking.name}: {strategy}", variant, strategy)
        without_splade = tuple((s, 0.0 if s == "splade" else w) for s, w in current.weights)
        choices = []
        for c in self.chunkings:
            choices.append((f"{c.name}: fused", replace(current, chunking=c)))
            if without_splade != current.weights:
                choices.append(
                    (
                        f"{c.name}: fused without SPLADE",
                        replace(current, chunking=c, weights=without_splade),
                    )
                )
        current = self._best("chunking", [("as configured", current), *choices])
        # 2. per strategy, each on its own ranking, at the chosen chunking
        current = self._best(
            "bm25",
            [("as configured", current)]
            + [
                (f"k1={k1} b={b} avg_len={a:g}", replace(current, bm25=Bm25Setting(k1, b, a)))
                for a in (current.bm25.avg_len, self._mean_chunk_terms(current.chunking))
                for k1 in self.grid.bm25_k1
                for b in self.grid.bm25_b
            ],
            "bm25",
        )
        fielded = [("title counted once (as indexed)", current)]
        fielded += [
            (f"BM25F title x{w:g}", replace(current, bm25=replace(current.bm25, title_weight=w)))
            for w in self.grid.title_weights_one
        ]
        fielded += [
            (
                f"separate fields, title x{w:g}",
                replace(current, bm25=replace(current.bm25, title_weight=w, fields="separate")),
            )
            for w in self.grid.title_weights_separate
        ]
        current = self._best("bm25-fields", fielded, "bm25")
        rm3 = [("no RM3", current)] + [
            (f"RM3 docs={r.fb_docs} terms={r.fb_terms} alpha={r.alpha}", replace(current, rm3=r))
            for r in self.grid.rm3
        ]
        current = self._best("bm25-rm3", rm3, "bm25")
        current = self._best(
            "splade-q",
            [(f"query terms {current.splade_query_terms} (as configured)", current)]
            + [
                (f"query terms {n}", replace(current, splade_query_terms=n))
                for n in self.grid.splade_query_terms
                if n != current.splade_query_terms
            ],
            "splade",
        )
        # Each per-strategy method must help the fused default, not only its own ranking.
        current = self.ablate(current, base)
        # 3. fusion, for the strategies as they now are
        grid = [("as configured", current)]
        for (method, k), wb, ws in itertools.product(
            self.grid.fusion_methods, self.grid.bm25_weights, self.grid.splade_weights
        ):
            weights = (("bm25", wb), ("splade", ws), ("dense", 1.0))
            if sum(w > 0 for _, w in weights) < 2:
                continue
            name = f"{method}{' k=' + str(k) if method == 'rrf' else ''} w=bm25:{wb:g},splade:{ws:g},dense:1"
            grid.append((name, replace(current, method=method, k=k, weights=weights)))
        current = self._best("fusion", grid)
        current = self._best(
            "candidates",
            [(f"{current.candidates} chunks a strategy (as configured)", current)]
            + [
                (f"{n} chunks a strategy", replace(current, candidates=n))
                for n in self.grid.candidates
                if n != current.candidates
            ],
        )
        # 4. aggregation (document-level fusion) against the service's chunk-level fusion
        self._best(
            "aggregation",
            [("chunk-level fusion (the service)", current)]
            + [
                (
                    f"{m}{n if m == 'sum' else ''} then document-level fusion",
                    replace(current, aggregation=(m, n)),
                )
                for m, n in self.grid.aggregations
            ],
        )
        # Greedy stages can end below where they started: then nothing helped.
        if self.score(current) < self.score(base):
            log.info("no tuned configuration beat the baseline: keeping it")
            return base
        return current

    def score(self, setting: Setting) -> float:
        """The split's fused nDCG@10 of a setting already tried (or scored now); -inf when it
        could not be scored."""
        for trial in reversed(self.trials):
            if trial.setting == setting and trial.stage not in self._single_stages:
                return -math.inf if trial.metrics is None else trial.metrics["ndcg@10"]
        return self._try("check", "re-scored", setting)

    def ablations(self, chosen: Setting, base: Setting) -> list[tuple[str, Setting]]:
        """The chosen setting with one method at a time back at its baseline."""
        out = [("chosen configuration", chosen)]
        if (chosen.bm25.k1, chosen.bm25.b, chosen.bm25.avg_len) != (
            base.bm25.k1,
            base.bm25.b,
            base.bm25.avg_len,
        ):
            out.append(
                (
                    "without BM25 k1/b/avg_len tuning",
                    replace(
                        chosen,
                        bm25=replace(
                            chosen.bm25, k1=base.bm25.k1, b=base.bm25.b, avg_len=base.bm25.avg_len
                        ),
                    ),
                )
            )
        if (chosen.bm25.title_weight, chosen.bm25.fields) != (1.0, "one"):
            out.append(
                (
                    "without title/body field weighting",
                    replace(chosen, bm25=replace(chosen.bm25, title_weight=1.0, fields="one")),
                )
            )
        if chosen.rm3 is not None:
            out.append(("without RM3", replace(chosen, rm3=None)))
        if chosen.splade_query_terms != base.splade_query_terms:
            out.append(
                (
                    "without SPLADE query pruning change",
                    replace(chosen, splade_query_terms=base.splade_query_terms),
                )
            )
        if chosen.chunking != base.chunking:
            out.append(("without the chunking change", replace(chosen, chunking=base.chunking)))
        if chosen.candidates != base.candidates:
            out.append(
                ("without the candidates change", replace(chosen, candidates=base.candidates))
            )
        return out

    def method_variants(self, chosen: Setting) -> list[tuple[str, Setting]]:
        """Every method against the chosen configuration: the baseline, the choice, each kept
        method taken out, each method not kept put in (its best setting on the tuning split),
        each fusion method at its best, and the choice's strategies alone."""
        base = self.baseline()
        out = [("configuration before tuning", base), *self.ablations(chosen, base)]

        def best_of(stage: str, keep: Callable[[Trial], bool] = lambda t: True) -> Trial | None:
            trials = [
                t for t in self.trials if t.stage == stage and t.metrics is not None and keep(t)
            ]
            return max(trials, key=lambda t: t.metrics["ndcg@10"], default=None)

        tuned = best_of("bm25", lambda t: t.method != "as configured")
        if tuned and (tuned.setting.bm25.k1, tuned.setting.bm25.b, tuned.setting.bm25.avg_len) != (
            chosen.bm25.k1,
            chosen.bm25.b,
            chosen.bm25.avg_len,
        ):
            bm25 = replace(
                chosen.bm25,
                k1=tuned.setting.bm25.k1,
                b=tuned.setting.bm25.b,
                avg_len=tuned.setting.bm25.avg_len,
            )
            out.append((f"with BM25 {tuned.method}", replace(chosen, bm25=bm25)))
        one = best_of(
            "bm25-fields",
            lambda t: t.setting.bm25.fields == "one" and t.setting.bm25.title_weight != 1.0,
        )
        two = best_of("bm25-fields", lambda t: t.setting.bm25.fields == "separate")
        for label, trial in (
            ("with BM25F title weight", one),
            ("with separate title/body fields", two),
        ):
            if trial and (trial.setting.bm25.fields, trial.setting.bm25.title_weight) != (
                chosen.bm25.fields,
                chosen.bm25.title_weight,
            ):
                bm25 = replace(
                    chosen.bm25,
                    fields=trial.setting.bm25.fields,
                    title_weight=trial.setting.bm25.title_weight,
                )
                out.append((f"{label} ({trial.method})", replace(chosen, bm25=bm25)))
        rm3 = best_of("bm25-rm3", lambda t: t.setting.rm3 is not None)
        if rm3 and chosen.rm3 is None:
            out.append((f"with {rm3.method}", replace(chosen, rm3=rm3.setting.rm3)))
        for chunking in self.chunkings:
            if chunking != chosen.chunking:
                out.append((f"with chunking {chunking.name}", replace(chosen, chunking=chunking)))
        for method, n in self.grid.aggregations:
            label = f"{method}{n if method == 'sum' else ''}"
            out.append(
                (
                    f"with {label} aggregation, document-level fusion",
                    replace(chosen, aggregation=(method, n)),
                )
            )
        for method in ("rrf", "weighted", "dbsf"):
            trial = best_of("fusion", lambda t, m=method: t.setting.method == m)
            if trial and method != chosen.method:
                out.append(
                    (f"fusion {trial.method}", replace(trial.setting, candidates=chosen.candidates))
                )
        for strategy in STRATEGIES:
            alone = tuple((s, 1.0 if s == strategy else 0.0) for s in STRATEGIES)
            out.append((f"{strategy} alone", replace(chosen, weights=alone)))
        return out

    def ablate(self, chosen: Setting, base: Setting) -> Setting:
        """Drops, one at a time, any method whose removal costs the fused nDCG@10 less than
        ``MIN_GAIN``."""
        while True:
            variants = self.ablations(chosen, base)
            scores = [self._try("ablation", name, s) for name, s in variants]
            best = max(range(1, len(variants)), key=lambda i: scores[i], default=None)
            if best is None or scores[best] <= scores[0] - MIN_GAIN:
                return chosen
            log.info("dropping %r: it did not help the fused default", variants[best][0])
            chosen = variants[best][1]

    def _mean_chunk_terms(self, chunking: Chunking) -> float:
        corpus = self.workspace(chunking).corpus
        lengths = [
            sum(t.values()) + sum(b.values())
            for t, b in zip(corpus.title_counts, corpus.body_counts, strict=True)
        ]
        return round(float(np.mean(lengths)), 1)


def chosen_overrides(setting: Setting, config: AppConfig) -> dict:
    """The configuration keys the chosen setting sets (a YAML fragment for config files)."""
    weights = {s: w for s, w in setting.weights if w > 0}
    norm = weights.get("dense", 1.0)
    return {
        "chunker": {
            "max_tokens": setting.chunking.max_tokens,
            "overlap_tokens": setting.chunking.overlap_tokens,
        },
        "dense": {"max_length": setting.chunking.model_length},
        "splade": {
            "max_length": setting.chunking.model_length,
            "query_top_k": setting.splade_query_terms,
        },
        "bm25": {
            "k1": setting.bm25.k1,
            "b": setting.bm25.b,
            "avg_len": setting.bm25.avg_len,
            "title_weight": int(setting.bm25.title_weight),
        },
        "search": {
            "strategies": setting.strategies,
            "candidates": setting.candidates,
            "fusion": {
                "method": setting.method,
                "k": setting.k,
                "weights": {s: round(w / norm, 4) for s, w in weights.items()},
            },
        },
    }


def score_on(
    tuner: Tuner, dataset: BeirDataset, variants: list[tuple[str, Setting]]
) -> list[dict[str, float] | None]:
    """Each variant's metrics on ``dataset``'s split (for the held-out split: once, at the end)."""
    out: list[dict[str, float] | None] = []
    for _, setting in variants:
        try:
            out.append(tuner.workspace(setting.chunking, dataset).score(setting))
        except NotEncoded:
            out.append(None)
    return out


def write_report(path: Path, payload: dict, render: Callable[[dict], str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps(payload, indent=2, default=str))
    path.with_suffix(".md").write_text(render(payload))


def render_report(payload: dict) -> str:
    """The tuning report in Markdown: every trial by stage, the choice, the held-out scores."""
    lines = [
        f"# Tuning on {payload['dataset']} ({payload['split']}): "
        f"{payload['queries']} queries, {payload['documents']} documents",
        "",
        "Every row is the fused default as `/v1/search` computes it (stage `bm25*`, `splade-q` "
        "and per-strategy `chunking` rows: that strategy alone). **bold**: kept.",
        "",
        "| stage | method | nDCG@10 | Recall@100 | MRR@10 |",
        "|---|---|---|---|---|",
    ]
    for trial in payload["trials"]:
        m = trial["metrics"]
        name = f"**{trial['method']}**" if trial["chosen"] else trial["method"]
        if m is None:
            lines.append(f"| {trial['stage']} | {name} | not run: {trial['note']} | | |")
            continue
        lines.append(
            f"| {trial['stage']} | {name} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} "
            f"| {m['mrr@10']:.4f} |"
        )
    lines += [
        "",
        "## Chosen configuration",
        "",
        "```json",
        json.dumps(payload["overrides"], indent=2),
        "```",
    ]
    held_out = payload.get("final_split")
    header = f"| method | {payload['split']} nDCG@10 | {payload['split']} Recall@100 |"
    rule = "|---|---|---|"
    if held_out:
        header += f" {held_out} nDCG@10 | {held_out} Recall@100 |"
        rule += "---|---|"
    lines += [
        "",
        "## Every method against the chosen configuration",
        "",
        f"The {held_out} split was scored once, after every choice was made."
        if held_out
        else "No held-out split was scored.",
        "",
        header,
        rule,
    ]

    def cells(metrics: dict | None) -> list[str]:
        if metrics is None:
            return ["not run", ""]
        return [f"{metrics['ndcg@10']:.4f}", f"{metrics['recall@100']:.4f}"]

    for row in payload["methods"]:
        row_cells = [row["method"], *cells(row[payload["split"]])]
        if held_out:
            row_cells += cells(row[held_out])
        lines.append("| " + " | ".join(row_cells) + " |")
    return "\n".join(lines) + "\n"
