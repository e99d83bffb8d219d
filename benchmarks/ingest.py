"""Ingest over HTTP on Ray Serve, against the encoders' own throughput.

    python -m benchmarks ingest [--docs 1000] [--docs-per-request 100] [--clients 4]
        [--config config/local.yaml] [--url http://127.0.0.1:8000] [--corpus DIR]
        [--chunker NAME] [--tokenizer-threads N] [--skip-ceiling] [--out STEM]

1. The ceiling, in this process before any ingest: the corpus chunked as the service chunks
   it, then each encoder alone in one blocking call over every chunk text (the model's own
   batched throughput, tokenizing on ``--tokenizer-threads`` threads as a model replica does
   on the CPUs it reserves). The slower encoder's figure is the yardstick.
2. ``--clients`` concurrent clients POST ``--docs-per-request`` documents a request to the
   service (``--url``, or one started here from ``--config`` with a fresh data directory);
   documents/s and chunks/s from the first request to the last answer, and the cores each
   kind of process used meanwhile.
3. The same documents again: every one unchanged (content hashes), nothing written.

``--corpus`` is a BEIR folder (SciFact by default) or a folder of files. The figure that
matters is HTTP chunks/s over the slower encoder's: how close the pipelined ingest comes to
the model that bounds it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.processes import CpuMeter, own_processes
from benchmarks.rawhttp import RawHttpPool
from benchmarks.report import default_stem, table, write_report
from benchmarks.service import (
    add_run_arguments,
    app_config,
    fresh_run,
    serving,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--docs-per-request", type=int, default=100)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--chunker", help="the chunker to run (default: the configuration's)")
    parser.add_argument("--url", help="a running service (default: start one here)")
    parser.add_argument("--skip-ceiling", action="store_true")
    parser.add_argument("--tokenizer-threads", type=int, default=1)


def load_corpus(folder: Path, count: int) -> list[Any]:
    from serve_app.evaluation.beir import load_beir
    from serve_app.loaders.base import iter_files, load_file

    if (folder / "corpus.jsonl").is_file():
        return load_beir(folder, "test", max_docs=count).corpus[:count]
    return [load_file(path) for path in sorted(iter_files([folder]))[:count]]


async def encoder_ceiling(config: Any, documents: list[Any]) -> dict:
    """Chunks/s of each encoder alone over the corpus's chunk texts: one blocking ``encode``
    call over all of them (the model's own batched throughput), or its document lane where it
    has no such call; the slower one is the yardstick."""
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.ingest import encoding_text

    components = await build_components(config)
    try:
        chunked = await components.chunker.chunk_many(documents)
        texts = [encoding_text(c, config.chunker.contextual_header) for cs in chunked for c in cs]
        rates = {}
        for name, encoder in (
            ("dense", components.dense),
            ("splade", components.sparse.get("splade")),
        ):
            if encoder is None:
                continue
            for some in (texts[:16], texts):  # a warm-up, then the timed call
                started = time.perf_counter()
                if not hasattr(encoder, "encode"):
                    await (
                        encoder.embed_documents if name == "dense" else encoder.encode_documents
                    )(some)
                else:
                    encoder.encode(some, *(() if name == "dense" else (config.splade.doc_top_k,)))
            rates[name] = round(len(texts) / (time.perf_counter() - started), 2)
    finally:
        await components.close()
    slower = min(rates, key=lambda name: rates[name])
    return {"chunks": len(texts), "chunks_per_s": rates, "slower_encoder": slower}


async def post_all(pool: RawHttpPool, documents: list[Any], per_request: int, clients: int) -> dict:
    """``clients`` concurrent clients POST ``per_request`` documents a request until all are sent."""
    pending = [documents[i : i + per_request] for i in range(0, len(documents), per_request)]
    pending.reverse()
    totals = {"documents": 0, "chunks": 0, "unchanged": 0, "failed_requests": 0}
    stages: dict[str, float] = {}

    async def client() -> None:
        while pending:
            batch = [{"id": d.id, "title": d.title, "text": d.text} for d in pending.pop()]
            reply = await pool.post_json("/v1/documents", {"documents": batch})
            if reply.status != 200:
                totals["failed_requests"] += 1
                print(f"request failed: {reply.status} {reply.body[:300]!r}", file=sys.stderr)
                continue
            result = reply.json()
            totals["chunks"] += result["chunks_written"]
            totals["documents"] += len(result["written"]) + len(result["unchanged"])
            totals["unchanged"] += len(result["unchanged"])
            for stage, ms in result.get("timings_ms", {}).items():
                stages[stage] = stages.get(stage, 0.0) + ms / 1000

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    seconds = time.perf_counter() - started
    return {
        **totals,
        "seconds": round(seconds, 1),
        "docs_per_s": round(totals["documents"] / seconds, 2),
        "chunks_per_s": round(totals["chunks"] / seconds, 2),
        "stage_seconds_summed": {k: round(v, 1) for k, v in sorted(stages.items())},
    }


def measure(data: dict, documents: list[Any], args: argparse.Namespace) -> dict:
    """The ceiling (unless skipped), then the ingest twice into the service at ``args.url``,
    or into one started here from ``data``."""
    from deployments.replicas.tokenizer_threads import tokenize_on_reserved_cpus

    report: dict = {"documents": len(documents), "clients": args.clients}
    report["request_docs"] = args.docs_per_request
    if not args.skip_ceiling:
        report["tokenizer_threads"] = tokenize_on_reserved_cpus(args.tokenizer_threads)
        report["ceiling"] = asyncio.run(encoder_ceiling(app_config(data), documents))
        print("ceiling:", json.dumps(report["ceiling"]), flush=True)

    async def twice(url: str) -> None:
        pool = RawHttpPool(url)
        meter = CpuMeter(own_processes())
        try:
            for name in ("http", "again"):
                report[name] = await post_all(pool, documents, args.docs_per_request, args.clients)
                report.setdefault("cores_by_process", meter.cores())
                print(f"{name}:", json.dumps(report[name]), flush=True)
        finally:
            await pool.close()

    if args.url:
        asyncio.run(twice(args.url))
    else:
        with serving(data) as url:
            asyncio.run(twice(url))
    if "ceiling" in report:
        ceiling = report["ceiling"]
        yardstick = ceiling["chunks_per_s"][ceiling["slower_encoder"]]
        report["http_over_slower_encoder"] = round(report["http"]["chunks_per_s"] / yardstick, 3)
    return report


def markdown(report: dict, title: str) -> list[str]:
    http, again = report["http"], report["again"]
    rows = [
        ["HTTP documents/s, chunks/s", f"{http['docs_per_s']}, {http['chunks_per_s']}"],
        ["chunks written, failed requests", f"{http['chunks']}, {http['failed_requests']}"],
        ["again: unchanged documents, seconds", f"{again['unchanged']}, {again['seconds']}"],
        ["cores by process", json.dumps(report["cores_by_process"])],
    ]
    if ceiling := report.get("ceiling"):
        rows += [
            ["encoders alone, chunks/s", json.dumps(ceiling["chunks_per_s"])],
            [f"HTTP / slower encoder ({ceiling['slower_encoder']})",
             f"{report['http_over_slower_encoder']:.1%}"],
        ]  # fmt: skip
    stages = json.dumps(http["stage_seconds_summed"])
    return [f"# {title}", "", *table(["measure", "value"], rows), "", f"Stage seconds: {stages}"]


def run(args: argparse.Namespace) -> int:
    data = fresh_run(args.config, "ingest")
    if args.chunker:
        data.setdefault("chunker", {})["name"] = args.chunker
    documents = load_corpus(args.corpus, args.docs)
    report = measure(data, documents, args)
    title = f"Ingest over HTTP: {len(documents)} documents of {args.corpus.name}, "
    title += f"{args.clients} clients, {args.docs_per_request} documents a request"
    stem = args.out or default_stem(f"ingest-{args.corpus.name}")
    write_report(stem, report, markdown(report, title))
    return 0
