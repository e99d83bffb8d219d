"""Answers on this machine: time to first token and tokens/s under concurrent answers,
multi-query against single-query retrieval (nDCG@10), and citation precision and recall.

    python -m benchmarks answers [--suites latency,bound,multi_query,citations,gate,injection,
                                          contradictions]
        [--queries 100] [--claims 100] [--injection-phrasings 2] [--concurrency 1,4] [--waves 5]
        [--threads 1,2] [--max-docs 2000] [--model catalog:...] [--lift-limits]

Everything runs in process on ``config/local.yaml``'s pipeline (the real small encoders, the
embedded store, llama.cpp with the configured model, 1.5B by default) over SciFact
(``$SERVE_APP_TEST_DATA/scifact``, ``--split``, test by default): the corpus is indexed once
under ``--data-dir`` (unchanged documents are skipped on later runs), limited to the judged
documents plus others up to ``--max-docs``.

- latency: for each concurrency c, ``--waves`` waves of c answers (different claims, the
  default path: understanding as configured) start together; time to first token is from the
  request's start (understanding, retrieval and the wait for a generation slot included), a
  stream's decode rate is its tokens over the time from its first token to its last, the
  aggregate rate all tokens over the waves' wall time. The shipped limits apply (queue,
  deadlines): refusals (429 before the stream, OVERLOADED events in it) and other errors are
  counted. ``--lift-limits`` raises the queue to the largest c and the deadlines to 15-60
  minutes (the report says so).
- bound: the engine's prompt-processing rate (a fresh ~900-token prompt, one output token)
  with each ``--threads`` setting, then one lone answer on the default path with each: the
  ratio of its first-token time to (its prompt tokens, the understanding call's included, over
  the fastest rate measured: the physical bound on this machine's cores).
- multi_query: per query, nDCG@10 of the documents ranked by the question as asked (the
  heavy list, as the pipeline searches a question without earlier turns), by the model's
  rewritten ``semantic_query`` alone, and by the question plus the model's reformulations
  (one schema-constrained call, filters offered and applied as in the pipeline), aggregated
  with RRF and the similarity blend (serve_app/fusion/queries.py); each sub-query retrieves
  ``--depth`` chunks. The blend's ``w`` and RRF's ``k`` are also tried on a grid over the
  same sub-query lists: choose them on ``--split train``, read them on test.
- citations: per claim, an answer on the default path (understanding and multi-query as
  configured, the configured ``top_k`` and ``max_tokens``, stated in the report); answers
  the relevance gate refused are counted (every SciFact claim is answerable by its corpus,
  so each is a false refusal); citation precision =
  citations whose document the qrels judge relevant / all valid citations; citation recall =
  relevant documents among the passages that are cited / relevant documents among the
  passages (both micro-averaged over the claims); citation support = valid citations whose
  passage supports their answer span (``serve_app/generation/citations.py``) / all valid
  citations.
- gate: the relevance floor (``answer.understanding.relevance_floor``): the best passage's
  similarity for ``--claims`` claims of the split against off-topic questions
  (benchmarks/gate.py); choose it on ``--split train``. No LLM call.
- injection: stored documents carrying orders (plain, disguised, in titles and headings,
  goal-directed, turn switches) asked related questions; the share of answers that did what
  the order asked, per attack and condition, with Wilson intervals (benchmarks/injection.py).
  Runs without SciFact when it is the only suite.

Writes ``benchmarks/results/<date>-<hardware>-answers.json`` and ``.md`` (or ``--out``'s
stem); the machine's load average is recorded with the figures (its cores may be shared).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import contradictions, injection
from benchmarks.gate import gate
from benchmarks.report import default_stem, table, write_report
from benchmarks.service import add_run_arguments
from serve_app.schemas import ScopeKey

TENANT = "bench"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, "--scifact")
    parser.add_argument("--model", help="llm.model instead of the configuration's")
    parser.add_argument("--suites", default="latency,multi_query,citations")
    parser.add_argument("--split", default="test", help="train: choose the aggregation there")
    parser.add_argument("--max-docs", type=int, default=1000)
    parser.add_argument("--data-dir", type=Path, default=Path(".data") / "bench-answers")
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--waves", type=int, default=5, help="latency: waves per concurrency")
    parser.add_argument("--latency-tokens", type=int, default=128)
    parser.add_argument("--threads", default="1,2", help="bound: llm.threads settings")
    parser.add_argument(
        "--lift-limits", action="store_true", help="raise the queue and deadlines (reported)"
    )
    parser.add_argument("--queries", type=int, default=100, help="multi_query: test queries")
    parser.add_argument("--depth", type=int, default=100, help="multi_query: chunks a sub-query")
    parser.add_argument("--claims", type=int, default=100, help="citations: test claims")
    parser.add_argument(
        "--injection-phrasings", type=int, default=2, help="injection: phrasings per attack (x10)"
    )
    parser.add_argument(
        "--injection-conditions", default="defended,before,undefended", help="injection"
    )
    parser.add_argument("--injection-repeats", type=int, default=20, help="injection: repeats")
    parser.add_argument("--injection-topics", type=int, default=10, help="injection: topics")
    parser.add_argument("--injection-attacks", default="", help="injection: rows (all)")
    parser.add_argument(
        "--answer-tokens",
        type=int,
        default=None,
        help="citations/injection: max_tokens (configured)",
    )


def load(args: argparse.Namespace, concurrency: list[int]) -> Any:
    from serve_app.config import config_from_dict, load_config

    data = load_config(args.config).model_dump()
    data["data_dir"] = str(args.data_dir)
    data["llm"]["enabled"] = True
    if args.lift_limits:
        data["llm"]["max_queued"] = max(data["llm"]["max_queued"], max(concurrency))
        data["answer"]["deadlines"] = {
            "understand_s": 900, "retrieve_s": 900, "first_token_s": 1800, "total_s": 3600,
        }  # fmt: skip
    if args.model:
        data["llm"]["model"] = args.model
    return config_from_dict(data, "benchmark")


async def build(
    config: Any, args: argparse.Namespace, scifact: bool = True
) -> tuple[Any, Any, Any, dict]:
    from serve_app.evaluation.beir import load_beir
    from serve_app.evaluation.runner import ingest_corpus
    from serve_app.generation import build_llm
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.ingest import IngestPipeline
    from serve_app.service import RetrievalService

    components = await build_components(config)
    llm = build_llm(config.llm)
    service = RetrievalService(components, llm=llm)
    if not scifact:
        return None, service, llm, {"documents": 0, "index_s": 0.0}
    dataset = load_beir(args.scifact, args.split, max_docs=args.max_docs)
    started = time.perf_counter()
    await ingest_corpus(IngestPipeline(components), ScopeKey(TENANT), dataset)
    index_s = time.perf_counter() - started
    print(f"index: {len(dataset.corpus)} documents in {index_s:.0f} s", file=sys.stderr)
    return dataset, service, llm, {"documents": len(dataset.corpus), "index_s": round(index_s, 1)}


def claims(dataset: Any, count: int) -> list[tuple[str, str]]:
    ids = sorted(dataset.queries, key=lambda q: int(q) if q.isdigit() else q)[:count]
    return [(q, dataset.queries[q]) for q in ids]


# -- latency ----------------------------------------------------------------------------------
# SciFact's claims are statements, to which the model often answers in a few tokens: the
# latency questions ask for an explanation, so every answer decodes for a while.
LATENCY_QUESTION = "Explain in detail what the passages report about this claim: {claim}"


async def one_answer(
    pipeline: Any, question: str, max_tokens: int | None, understand: bool | None = None
) -> dict[str, Any]:
    """One streamed answer on the default path (``understand`` None: as configured); a
    refusal before the stream (429) comes back as its error, as a client would see it."""
    from serve_app.errors import ServeAppError
    from serve_app.schemas import AnswerRequest

    request = AnswerRequest(
        question=question, understand=understand, multi_query=None, max_tokens=max_tokens
    )
    started = time.perf_counter()
    first = last = None
    done: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    try:
        prepared = await pipeline.prepare(
            await pipeline.check(request, ScopeKey(TENANT, request.collection))
        )
        async for event in pipeline.events(prepared):
            kind, data = event.event, event.data()
            now = time.perf_counter()
            if kind == "metadata":
                metadata = data
            elif kind == "delta":
                first = first or now
                last = now
            elif kind in ("done", "error"):
                done = data if kind == "done" else {"error": data}
    except ServeAppError as error:
        done = {"error": error.to_dict(), "refused_before_stream": True}
    tokens = (done.get("usage") or {}).get("completion_tokens", 0)
    decode_s = (last - first) if first and last and last > first else None
    return {
        "ttft_s": (first - started) if first else None,
        "total_s": time.perf_counter() - started,
        "tokens": tokens,
        "prompt_tokens": (done.get("usage") or {}).get("prompt_tokens", 0),
        "timings_ms": {**(metadata.get("timings_ms") or {}), **(done.get("timings_ms") or {})},
        "early_return": done.get("early_return"),
        "decode_tokens_per_s": (tokens - 1) / decode_s if decode_s and tokens > 1 else None,
        "error": done.get("error"),
        "refused_before_stream": bool(done.get("refused_before_stream")),
    }


def percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile (no interpolation between the few samples)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(share * len(ordered) + 0.5) - 1))]


async def latency(
    service: Any, dataset: Any, levels: list[int], waves: int, max_tokens: int
) -> list[dict]:
    pipeline = service.answer_pipeline
    needed = max(levels) * waves + 1
    questions = [LATENCY_QUESTION.format(claim=t) for _, t in claims(dataset, needed)]
    await one_answer(pipeline, questions[-1], 8)  # warm: the engine's first call
    rows = []
    for level in levels:
        answers: list[dict[str, Any]] = []
        started = time.perf_counter()
        for wave in range(waves):
            batch = questions[wave * level : (wave + 1) * level]
            answers += await asyncio.gather(*(one_answer(pipeline, q, max_tokens) for q in batch))
        wall = time.perf_counter() - started
        ttft = [a["ttft_s"] for a in answers if a["ttft_s"] is not None]
        rates = [a["decode_tokens_per_s"] for a in answers if a["decode_tokens_per_s"]]
        tokens = sum(a["tokens"] for a in answers)
        codes = [a["error"]["code"] for a in answers if a["error"]]
        row = {
            "concurrency": level,
            "answers": len(answers),
            "refused_429": sum(1 for a in answers if a["refused_before_stream"]),
            "overloaded_events": sum(
                1
                for a in answers
                if a["error"]
                and not a["refused_before_stream"]
                and a["error"]["code"] == "OVERLOADED"
            ),
            "errors": len(codes),
            "error_codes": sorted(set(codes)),
            "early_returns": sum(1 for a in answers if a["early_return"]),
            "ttft_p50_s": round(statistics.median(ttft), 2) if ttft else None,
            "ttft_p95_s": round(percentile(ttft, 0.95), 2) if ttft else None,
            "ttft_max_s": round(max(ttft), 2) if ttft else None,
            "decode_tokens_per_s_per_stream": round(statistics.mean(rates), 1) if rates else None,
            "aggregate_tokens_per_s": round(tokens / wall, 1),
            "tokens": tokens,
            "prompt_tokens_mean": round(statistics.mean(a["prompt_tokens"] for a in answers)),
            "wall_s": round(wall, 1),
        }
        print(f"latency: {row}", file=sys.stderr)
        rows.append(row)
    return rows


# -- bound --------------------------------------------------------------------------------------
# A prompt of about 900 tokens the engine has never seen (a fresh number first: no prompt cache).
BOUND_TEXT = (
    "Coral reefs recover from bleaching when water temperatures fall and herbivorous fish keep "
    "algae in check; surveys on protected reefs found recovery within a decade. "
)


async def prompt_rate(llm: Any, salt: int) -> dict[str, float]:
    """The engine's prompt-processing rate: one ~900-token prompt, one output token."""
    from serve_app.generation import GenerationParams
    from serve_app.generation.base import Message

    text = f"Run {salt}-{time.time_ns()}. " + BOUND_TEXT * 28
    messages = [Message("user", text + "\nSay OK.")]
    started = time.perf_counter()
    completion = await llm.complete(messages, GenerationParams(max_tokens=1, temperature=0.0))
    seconds = time.perf_counter() - started
    tokens = completion.usage.prompt_tokens
    return {"prompt_tokens": tokens, "seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / seconds, 1)}  # fmt: skip


class CountingLLM:
    """The engine, counting the prompt tokens of its whole-answer calls (the understanding
    call is one): what an answer's first token waited for besides its own prompt."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self.complete_prompt_tokens = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    async def complete(self, messages: Any, params: Any) -> Any:
        completion = await self._llm.complete(messages, params)
        self.complete_prompt_tokens += completion.usage.prompt_tokens
        return completion


async def bound(config: Any, args: argparse.Namespace, service: Any, dataset: Any) -> dict:
    """For each llm.threads setting: the prompt rate, then one lone answer's first token
    against the bound (the tokens it read, the understanding call's included, over the
    fastest rate measured in this run)."""
    from serve_app.generation import build_llm
    from serve_app.service import RetrievalService

    question = LATENCY_QUESTION.format(claim=claims(dataset, 1)[0][1])
    rows = []
    for n, threads in enumerate(int(t) for t in args.threads.split(",")):
        llm = CountingLLM(build_llm(config.llm.model_copy(update={"threads": threads})))
        try:
            answers = RetrievalService(service.components, llm=llm).answer_pipeline
            await prompt_rate(llm, -1 - n)  # warm: the engine's first call
            rates = [await prompt_rate(llm, 10 * n + i) for i in range(3)]
            llm.complete_prompt_tokens = 0
            answer = await one_answer(answers, question, args.latency_tokens)
            answer["understanding_prompt_tokens"] = llm.complete_prompt_tokens
        finally:
            llm.close()
        rows.append({
            "threads": threads,
            "prompt_tokens_per_s": max(r["tokens_per_s"] for r in rates),
            "rate_samples": rates,
            "answer": {k: answer[k] for k in ("ttft_s", "prompt_tokens",
                       "understanding_prompt_tokens", "timings_ms", "error")},
        })  # fmt: skip
        print(f"bound: {rows[-1]}", file=sys.stderr)
    fastest = max(row["prompt_tokens_per_s"] for row in rows)
    for row in rows:
        answer = row["answer"]
        read = answer["prompt_tokens"] + answer["understanding_prompt_tokens"]
        row["bound_s"] = round(read / fastest, 2)
        row["ratio"] = round(answer["ttft_s"] / row["bound_s"], 2) if answer["ttft_s"] else None
    return {"fastest_prompt_tokens_per_s": fastest, "cores": os.cpu_count(), "rows": rows}


# -- multi-query ------------------------------------------------------------------------------
async def multi_query(service: Any, dataset: Any, count: int, depth: int) -> dict[str, Any]:
    from serve_app.evaluation.metrics import evaluate_run
    from serve_app.fusion.queries import distinct_queries
    from serve_app.generation import GenerationParams
    from serve_app.generation.understanding import (
        parse_understanding,
        understanding_messages,
        understanding_schema,
    )
    from serve_app.pipelines.answer import result_similarities
    from serve_app.schemas import SearchRequest

    config = service.config
    settings = config.answer.understanding
    reformulations = config.answer.multi_query.queries
    multi = config.answer.multi_query
    # As the pipeline calls it with understanding on (the default): filters offered, the
    # question first (the heavy list; the rewrite is for follow-ups), the understood filters
    # applied to every search; the rewritten ``semantic_query`` alone is measured beside.
    understand = settings.enabled
    schema = understanding_schema(settings, reformulations, [], understand)
    understood_run: dict[str, list[tuple[str, float]]] = {}
    single_run: dict[str, list[tuple[str, float]]] = {}
    multi_run: dict[str, list[tuple[str, float]]] = {}
    lists: dict[str, list[list[tuple[str, float]]]] = {}  # query -> each sub-query's hits
    llm_s: list[float] = []
    sub_query_counts: list[int] = []
    filtered = 0
    selected = claims(dataset, count)
    for i, (query_id, question) in enumerate(selected, 1):
        started = time.perf_counter()
        completion = await service.llm.complete(
            understanding_messages(question, [], settings, reformulations, [], understand),
            GenerationParams(max_tokens=settings.max_tokens, temperature=0.0, json_schema=schema),
        )
        llm_s.append(time.perf_counter() - started)
        understood = parse_understanding(completion.text, question, settings, [], reformulations)
        heavy = question  # the pipeline's rule for a question without earlier turns
        filters = understood.filters if understand else None
        filtered += filters is not None
        queries = distinct_queries([heavy, *understood.queries], 1 + reformulations)
        sub_query_counts.append(len(queries))
        responses = await asyncio.gather(
            *(
                service.search(
                    SearchRequest(query=q, top_k=depth, filters=filters), ScopeKey(TENANT)
                )
                for q in [*queries, understood.semantic_query]
            )
        )
        *responses, rewritten = responses
        single_run[query_id] = documents(responses[0])
        understood_run[query_id] = documents(rewritten)
        lists[query_id] = [result_similarities(r.results) for r in responses]
        multi_run[query_id] = aggregated(
            lists[query_id], multi.rrf_k, multi.similarity_weight, multi.question_weight
        )
        if i % 10 == 0:
            print(f"multi_query: {i}/{len(selected)}", file=sys.stderr)
    qrels = {q: dataset.qrels[q] for q, _ in selected}
    return {
        "queries": len(selected),
        "depth": depth,
        "reformulations_asked": reformulations,
        "sub_queries_mean": round(statistics.mean(sub_query_counts), 2),
        "similarity_weight": multi.similarity_weight,
        "rrf_k": multi.rrf_k,
        "understanding_call_s_p50": round(statistics.median(llm_s), 2),
        "heavy_list": "question",
        "understood_filters_applied": filtered,
        "understood": evaluate_run(understood_run, qrels),
        "single": evaluate_run(single_run, qrels),
        "multi": evaluate_run(multi_run, qrels),
        "question_weight": multi.question_weight,
        "grid": [
            {
                "question_weight": v,
                "similarity_weight": w,
                "rrf_k": k,
                **evaluate_run({q: aggregated(hits, k, w, v) for q, hits in lists.items()}, qrels),
            }
            for v in GRID_QUESTION_WEIGHTS
            for k in GRID_RRF_K
            for w in GRID_WEIGHTS
        ],
    }


def documents(response: Any) -> list[tuple[str, float]]:
    """A search's documents, each ranked where its first chunk is."""
    best: dict[str, float] = {}
    for result in response.results:
        best.setdefault(result.chunk.doc_id, result.score)
    return list(best.items())


# The aggregation's parameters tried on the same sub-query lists (no new retrieval or LLM call).
GRID_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
GRID_RRF_K = (1, 10, 60)
GRID_QUESTION_WEIGHTS = (1.0, 2.0, 4.0)


def aggregated(
    lists: list[list[tuple[str, float]]], k: int, w: float, question_weight: float
) -> list[tuple[str, float]]:
    from serve_app.fusion.queries import aggregate_sub_queries

    weights = [question_weight] + [1.0] * (len(lists) - 1)
    documents = aggregate_sub_queries(lists, k=k, similarity_weight=w, weights=weights)
    return [(d.doc_id, d.score) for d in documents]


# -- citations --------------------------------------------------------------------------------
async def citations(
    service: Any, dataset: Any, count: int, max_tokens: int | None, progress: Any = None
) -> dict[str, Any]:
    """``progress(figures so far)`` every 10 claims: a long run keeps what it measured."""
    from serve_app.schemas import AnswerRequest

    pipeline = service.answer_pipeline
    cited_relevant = cited_total = cited_supported = invalid = unsupported = 0
    relevant_shown = relevant_cited = 0
    top_k: set[int] = set()
    uncited = sentences_flagged_answers = no_citation = errors = 0
    early: dict[str, int] = {}
    judged_irrelevant = overruled = 0
    seconds: list[float] = []
    selected = claims(dataset, count)

    def figures(done: int) -> dict[str, Any]:
        answered = done - errors
        return {
            "claims": done,
            "errors": errors,
            "early_returns": early,
            "gate_false_refusal_rate": round(early.get("irrelevant", 0) / answered, 3)
            if answered
            else None,
            "gate_judged_irrelevant": judged_irrelevant,
            "gate_overruled": overruled,
            "citation_precision": round(cited_relevant / cited_total, 3) if cited_total else None,
            "citation_recall": round(relevant_cited / relevant_shown, 3)
            if relevant_shown
            else None,
            "citation_support": round(cited_supported / cited_total, 3) if cited_total else None,
            "unsupported_sentences": unsupported,
            "top_k": sorted(top_k),
            "citations": cited_total,
            "invalid_citations": invalid,
            "answers_without_citation": no_citation,
            "answers_with_uncited_sentences": sentences_flagged_answers,
            "uncited_sentences": uncited,
            "relevant_passages_shown": relevant_shown,
            "answered": answered,
            "answer_s_p50": round(statistics.median(seconds), 1) if seconds else None,
        }

    for i, (query_id, claim) in enumerate(selected, 1):
        relevant = {d for d, grade in dataset.qrels[query_id].items() if grade > 0}
        started = time.perf_counter()
        answer = await pipeline.answer(
            AnswerRequest(question=claim, max_tokens=max_tokens, stream=False),
            ScopeKey(TENANT),
        )
        seconds.append(time.perf_counter() - started)
        if answer.get("error"):
            errors += 1
            continue
        if answer.get("early_return"):
            early[answer["early_return"]] = early.get(answer["early_return"], 0) + 1
        understanding = answer.get("understanding") or {}
        judged_irrelevant += understanding.get("is_relevant") is False
        overruled += bool((understanding.get("relevance_check") or {}).get("overruled"))
        shown = {r["doc_id"] for r in answer["results"]}
        cited_docs = [c["doc_id"] for c in answer["citations"]]
        if "top_k" in answer:  # an early return (irrelevant) retrieves nothing
            top_k.add(answer["top_k"])
        cited_total += len(cited_docs)
        cited_supported += sum(1 for c in answer["citations"] if c["supported"])
        unsupported += len(answer["unsupported_sentences"])
        cited_relevant += sum(1 for d in cited_docs if d in relevant)
        invalid += len(answer["invalid_citations"])
        relevant_shown += len(shown & relevant)
        relevant_cited += len(shown & relevant & set(cited_docs))
        uncited += len(answer["uncited_sentences"])
        sentences_flagged_answers += bool(answer["uncited_sentences"])
        no_citation += not cited_docs
        if i % 10 == 0:
            print(f"citations: {i}/{len(selected)}", file=sys.stderr)
            if progress is not None and i < len(selected):
                progress(figures(i))
    return figures(len(selected))


def markdown(report: dict[str, Any]) -> str:
    split = report.get("split", "test")  # reports written before --split existed
    lines = [
        f"# Answers on this CPU ({report['date']})",
        "",
        f"`{report['command']}`",
        "",
        f"Model `{report['model']}` on llama.cpp ({report['llm']['threads']} thread, "
        f"{report['llm']['parallel']} slots); SciFact {split}, "
        f"{report['index']['documents']} documents indexed (judged + others); top_k "
        f"{report['answer']['top_k']}, max_tokens {report['answer']['max_tokens']}; limits "
        f"{report.get('limits', 'lifted (queue and deadlines)')}. "
        "Load average over the run: "
        f"{report['load_average']['start']} at the start, {report['load_average']['end']} at "
        "the end (2 shared cores).",
        "",
    ]
    if "bound" in report:
        b = report["bound"]
        lines += [
            "## First token against the engine's bound",
            "",
            f"One lone answer on the default path per `llm.threads`; the bound is the tokens it "
            f"read (its prompt and the understanding call's) over the fastest prompt rate "
            f"measured in this run ({b['fastest_prompt_tokens_per_s']} tokens/s, "
            f"{b['cores']} cores).",
            "",
        ]
        lines += table(
            ["llm.threads", "prompt tokens/s", "answer prompt tokens", "understanding prompt "
             "tokens", "first token (s)", "bound (s)", "ratio"],
            [[row["threads"], row["prompt_tokens_per_s"], row["answer"]["prompt_tokens"],
              row["answer"]["understanding_prompt_tokens"], round(row["answer"]["ttft_s"] or 0, 2),
              row["bound_s"], row["ratio"]] for row in b["rows"]],
        )  # fmt: skip
        lines.append("")
    if "latency" in report:
        lines += ["## Time to first token and tokens/s", ""]
        lines += table(
            ["concurrent answers", "answers", "TTFT p50 (s)", "TTFT p95 (s)", "TTFT max (s)",
             "decode tokens/s per stream", "aggregate tokens/s", "prompt tokens (mean)",
             "429 refusals", "OVERLOADED events", "errors"],
            [[row["concurrency"], row.get("answers"), row["ttft_p50_s"], row.get("ttft_p95_s"),
              row["ttft_max_s"], row["decode_tokens_per_s_per_stream"],
              row["aggregate_tokens_per_s"], row["prompt_tokens_mean"], row.get("refused_429"),
              row.get("overloaded_events"), row["errors"]] for row in report["latency"]],
        )  # fmt: skip
        lines.append("")
    if "multi_query" in report:
        mq = report["multi_query"]
        lines += [
            "## Multi-query against single-query retrieval",
            "",
            f"{mq['queries']} {split} queries, {mq['sub_queries_mean']} sub-queries on average "
            f"({mq['reformulations_asked']} reformulations asked), w = "
            f"{mq['similarity_weight']}, RRF k = {mq['rrf_k']}, question weight "
            f"{mq.get('question_weight', 1.0)}, {mq['depth']} chunks a "
            f"sub-query; understanding call p50 {mq['understanding_call_s_p50']} s; the "
            f"heavy list: {mq.get('heavy_list', 'question')} (single: it alone; understood: "
            f"the model's rewrite alone); understood filters applied to "
            f"{mq.get('understood_filters_applied', 0)} queries.",
            "",
        ]
        lines += table(
            ["retrieval", "nDCG@10", "Recall@100", "MRR@10"],
            [[name, mq[name]["ndcg@10"], mq[name]["recall@100"], mq[name]["mrr@10"]]
             for name in ("single", "understood", "question", "multi") if name in mq],
        )  # fmt: skip
        if mq.get("grid"):
            best = max(mq["grid"], key=lambda row: row["ndcg@10"])
            lines += [
                "",
                "The aggregation's parameters on the same sub-query lists (best nDCG@10: "
                f"w = {best['similarity_weight']}, k = {best['rrf_k']}, question weight "
                f"{best.get('question_weight', 1.0)}):",
                "",
            ]
            lines += table(
                ["question weight", "w", "RRF k", "nDCG@10", "Recall@100", "MRR@10"],
                [[row.get("question_weight", 1.0), row["similarity_weight"], row["rrf_k"],
                  row["ndcg@10"], row["recall@100"], row["mrr@10"]] for row in mq["grid"]],
            )  # fmt: skip
        lines.append("")
    if "citations" in report:
        c = report["citations"]
        lines += [
            "## Citations",
            "",
            f"{c['claims']} test claims ({c['errors']} failed), top_k "
            f"{c.get('top_k', [5])} passages each"
            f"{', understanding as configured' if 'top_k' in c else ''}.",
            "",
            f"- citation precision: {c['citation_precision']} ({c['citations']} citations)",
            f"- citation support: {c.get('citation_support')} (valid citations whose passage "
            f"supports their span); unsupported sentences: {c.get('unsupported_sentences')}",
            f"- citation recall: {c['citation_recall']} ({c['relevant_passages_shown']} "
            "relevant passages shown)",
            f"- invalid citations: {c['invalid_citations']}; answers without a citation: "
            f"{c['answers_without_citation']}; answers with an uncited sentence: "
            f"{c['answers_with_uncited_sentences']}",
            f"- relevance gate: false refusal rate {c.get('gate_false_refusal_rate')} "
            f"(early returns {c.get('early_returns')}; every claim is answerable); the model "
            f"judged {c.get('gate_judged_irrelevant', 'n/a')} irrelevant, the relevance floor "
            f"overruled {c.get('gate_overruled', 'n/a')} of them",
            f"- answer time p50: {c['answer_s_p50']} s",
            "",
        ]
    if "gate" in report:
        g = report["gate"]
        lines += ["## The relevance gate's floor", ""]
        if "error" in g:
            lines += [g["error"], ""]
        else:
            lines += [
                f"The best absolute similarity (reranker score, else dense cosine) among the "
                f"top {g['top_k']} passages of each question's own search: "
                f"{g['answerable']['n']} {split} claims (answerable) against "
                f"{g['off_topic']['n']} off-topic questions (benchmarks/gate.py).",
                "",
            ]
            lines += table(
                ["questions", "n", "min", "p05", "median", "max"],
                [[name, g[name]["n"], g[name]["min"], g[name]["p05"], g[name]["median"],
                  g[name]["max"]] for name in ("answerable", "off_topic")],
            )  # fmt: skip
            lines += [
                "",
                f"Highest off-topic: {g['off_topic_highest']}. Chosen floor (one 0.05 step "
                f"above the lowest that no off-topic question reaches): **{g['chosen_floor']}**"
                f"; answerable claims below it: {g['answerable_below_chosen']}.",
                "",
            ]
            lines += table(
                ["floor", "off-topic overruled", "answerable below"],
                [[r["floor"], r["off_topic_overruled"], r["answerable_below"]]
                 for r in g["grid"]],
            )  # fmt: skip
            lines.append("")
    if "injection" in report:
        lines += injection.markdown(report["injection"])
    if "contradictions" in report:
        lines += contradictions.markdown(report["contradictions"])
    return "\n".join(lines)


def save(report: dict[str, Any], args: argparse.Namespace) -> None:
    """Written after every suite, so a long run keeps what it finished."""
    report["load_average"] = {
        **report["load_average"],
        "end": [round(x, 1) for x in os.getloadavg()],
    }
    write_report(args.out or default_stem("answers"), report, [markdown(report)])


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(measure(args))
    return 0


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    if suites == ["contradictions"]:  # the citation check alone: no model, no index
        figures = contradictions.measure(args.scifact, args.claims)
        command = "python -m benchmarks answers " + " ".join(sys.argv[2:])
        title = [f"# Contradictions ({datetime.date.today().isoformat()})", "", f"`{command}`", ""]
        lines = title + contradictions.markdown(figures)
        write_report(args.out or default_stem("answers-contradictions"), figures, lines)
        print(f"contradictions: {figures['forms']}", file=sys.stderr)
        return {"contradictions": figures}
    levels = [int(c) for c in args.concurrency.split(",")]
    config = load(args, levels)
    load_start = [round(x, 1) for x in os.getloadavg()]
    dataset, service, llm, index = await build(config, args, scifact=suites != ["injection"])
    report: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "command": "python -m benchmarks answers " + " ".join(sys.argv[2:]),
        "model": config.llm.model,
        "split": args.split,
        "llm": config.llm.model_dump(include={"parallel", "threads", "context_tokens"}),
        "answer": config.answer.model_dump(include={"top_k", "max_passage_tokens", "max_tokens"}),
        "index": index,
        "limits": "lifted: llm.max_queued >= the largest concurrency, deadlines 15-60 min"
        if args.lift_limits
        else "shipped (llm.max_queued, answer.deadlines as configured)",
        "deadlines": config.answer.deadlines.model_dump(),
        "max_queued": config.llm.max_queued,
        "load_average": {"start": load_start},
    }
    try:
        if "bound" in suites:
            report["bound"] = await bound(config, args, service, dataset)
            save(report, args)
        if "latency" in suites:
            report["latency"] = await latency(
                service, dataset, levels, args.waves, args.latency_tokens
            )
            save(report, args)
        if "multi_query" in suites:
            report["multi_query"] = await multi_query(service, dataset, args.queries, args.depth)
            print(f"multi_query: {report['multi_query']}", file=sys.stderr)
            save(report, args)
        if "citations" in suites:

            def partial(figures: dict[str, Any]) -> None:
                report["citations"] = figures
                save(report, args)

            report["citations"] = await citations(
                service, dataset, args.claims, args.answer_tokens, partial
            )
            print(f"citations: {report['citations']}", file=sys.stderr)
            save(report, args)
        if "gate" in suites:
            report["gate"] = await gate(
                service, TENANT, claims(dataset, args.claims), config.answer.top_k
            )
            print(f"gate: {report['gate']}", file=sys.stderr)
            save(report, args)
        if "contradictions" in suites:
            report["contradictions"] = contradictions.measure(args.scifact, args.claims)
            save(report, args)
        if "injection" in suites:
            report["injection"] = await injection.injection(
                service,
                llm,
                TENANT,
                args.injection_phrasings,
                args.answer_tokens,
                tuple(c for c in args.injection_conditions.split(",") if c),
                args.injection_repeats,
                args.injection_topics,
                tuple(a for a in args.injection_attacks.split(",") if a),
            )
            print(f"injection: {report['injection']['rows']}", file=sys.stderr)
    finally:
        llm.close()
        await service.components.close()
    save(report, args)
    return report
