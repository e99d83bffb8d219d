"""Ingest through the HTTP API on Ray Serve against each encoder's own batched throughput.

    python benchmarks/ingest_http.py [--docs 1000] [--docs-per-request 100] [--clients 4]
        [--config config/local.yaml] [--url http://127.0.0.1:8000] [--corpus DIR]
        [--tokenizer-threads N] [--out PATH]

1. The ceiling, in this process before Serve starts: the SciFact abstracts are chunked as the
   service chunks them, and each encoder alone encodes every chunk text, twice: through its
   document lane (the batches the service runs) and with one blocking ``encode`` call over
   all of them (the model's own batched throughput, as ``../shared/gpu/check_encoders.py``
   measures it); chunks/s per encoder and way. The slower encoder's batched figure is the
   yardstick. ``--tokenizer-threads`` lets these calls tokenize on that many threads (as a
   model replica does on the CPUs it reserves; ``check_encoders.py`` tokenizes on every core).
2. The service (``--url``, or started here from ``--config`` on a free port with a fresh data
   directory): ``--clients`` concurrent clients POST the abstracts as JSON, ``--docs-per-request``
   a request; documents/s and chunks/s from the first request sent to the last answer.
The figure that matters is HTTP chunks/s over the slower encoder's chunks/s: how close the
pipelined ingest (chunking, both encoders, writes, HTTP, Serve) comes to the model that
bounds it. On one CPU machine the encoders also share the cores with everything else.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.rawhttp import RawHttpPool  # noqa: E402
from benchmarks.reports import write_report  # noqa: E402
from deployments.settings import with_serve  # noqa: E402
from deployments.tokenizer_threads import tokenize_on_reserved_cpus  # noqa: E402
from serve_app.config import AppConfig, load_config  # noqa: E402
from serve_app.evaluation.beir import load_beir  # noqa: E402
from serve_app.ports import free_port  # noqa: E402
from serve_app.schemas import Document  # noqa: E402

SCIFACT = ROOT.parent / "shared" / "data" / "scifact"
RESULTS = ROOT / "benchmarks" / "results"


async def encoder_ceiling(config: AppConfig, documents: list[Document]) -> dict:
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.ingest import encoding_text

    components = await build_components(config)
    try:
        chunks = [c for chunked in await components.chunker.chunk_many(documents) for c in chunked]
        texts = [encoding_text(c, config.chunker.contextual_header) for c in chunks]
        dense = components.dense
        lanes: dict[str, Callable[[list[str]], Awaitable[object]]] = {
            "dense": dense.embed_documents
        }
        batched: dict[str, Callable[[list[str]], object]] = {}
        if hasattr(dense, "encode"):
            batched["dense"] = dense.encode  # type: ignore[attr-defined]
        if "splade" in components.sparse:
            splade = components.sparse["splade"]
            lanes["splade"] = splade.encode_documents
            if hasattr(splade, "encode"):
                top_k = config.splade.doc_top_k
                batched["splade"] = lambda t: splade.encode(t, top_k)  # type: ignore[attr-defined]
        rates: dict[str, float] = {}
        for name, lane in lanes.items():
            await lane(texts[:16])  # warm-up
            started = time.perf_counter()
            await lane(texts)
            rates[name] = len(texts) / (time.perf_counter() - started)
        raw: dict[str, float] = {}
        for name, encode in batched.items():
            started = time.perf_counter()
            encode(texts)
            raw[name] = len(texts) / (time.perf_counter() - started)
    finally:
        await components.close()
    yardstick = raw if len(raw) == len(rates) else rates
    slower = min(yardstick, key=yardstick.get)  # type: ignore[arg-type]
    return {
        "chunks": len(texts),
        "chunks_per_s": {k: round(v, 2) for k, v in rates.items()},
        "batched_chunks_per_s": {k: round(v, 2) for k, v in raw.items()},
        "yardstick": "batched" if yardstick is raw else "lane",
        "slower_encoder": slower,
        "slower_chunks_per_s": round(yardstick[slower], 2),
    }


async def post_all(url: str, documents: list[Document], args: argparse.Namespace) -> dict:
    requests = [
        {
            "documents": [
                {"id": d.id, "title": d.title, "text": d.text}
                for d in documents[i : i + args.docs_per_request]
            ]
        }
        for i in range(0, len(documents), args.docs_per_request)
    ]
    pool = RawHttpPool(url, {"X-API-Key": args.api_key} if args.api_key else None)
    pending = list(reversed(requests))
    totals = {"chunks": 0, "documents": 0, "failed_requests": 0}
    stages: dict[str, float] = {}

    async def client() -> None:
        while pending:
            body = pending.pop()
            reply = await pool.post_json("/v1/documents", body)
            if reply.status != 200:
                totals["failed_requests"] += 1
                print(f"request failed: {reply.status} {reply.body[:300]!r}", file=sys.stderr)
                continue
            result = reply.json()
            totals["chunks"] += result["chunks_written"]
            totals["documents"] += len(result["written"]) + len(result["unchanged"])
            for stage, ms in result.get("timings_ms", {}).items():
                stages[stage] = stages.get(stage, 0.0) + ms / 1000

    started = time.perf_counter()
    try:
        await asyncio.gather(*(client() for _ in range(args.clients)))
    finally:
        await pool.close()
    seconds = time.perf_counter() - started
    return {
        **totals,
        "seconds": round(seconds, 1),
        "docs_per_s": round(totals["documents"] / seconds, 2),
        "chunks_per_s": round(totals["chunks"] / seconds, 2),
        "stage_seconds_summed": {k: round(v, 1) for k, v in sorted(stages.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=str(ROOT / "config" / "local.yaml"))
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--docs-per-request", type=int, default=100)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--url", help="a running service (default: start one here)")
    parser.add_argument("--api-key")
    parser.add_argument("--skip-ceiling", action="store_true")
    parser.add_argument("--corpus", type=Path, default=SCIFACT, help="a BEIR folder (SciFact)")
    parser.add_argument("--tokenizer-threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS / "ingest_http")
    args = parser.parse_args(argv)

    config = with_serve(load_config(args.config), port=free_port(), host="127.0.0.1")
    config = config.model_copy(update={"data_dir": tempfile.mkdtemp(prefix="bench-ingest-http-")})
    tenant = config.api.auth.anonymous_tenant
    documents = load_beir(args.corpus, "test", tenant).corpus[: args.docs]
    report: dict = {"documents": len(documents), "clients": args.clients}
    report["request_docs"] = args.docs_per_request
    if not args.skip_ceiling:
        report["tokenizer_threads"] = tokenize_on_reserved_cpus(args.tokenizer_threads)
        report["ceiling"] = asyncio.run(encoder_ceiling(config, documents))
        print("ceiling:", json.dumps(report["ceiling"]), flush=True)

    if args.url:
        report["http"] = asyncio.run(post_all(args.url, documents, args))
    else:
        from benchmarks.serving_path import wait_ready
        from deployments.local import start, stop

        url = start(config)
        try:
            wait_ready(url)
            report["http"] = asyncio.run(post_all(url, documents, args))
        finally:
            stop()
    print("http:", json.dumps(report["http"]), flush=True)
    if "ceiling" in report:
        report["http_over_slower_encoder"] = round(
            report["http"]["chunks_per_s"] / report["ceiling"]["slower_chunks_per_s"], 3
        )
    lines = [
        f"# Ingest over HTTP: {len(documents)} SciFact abstracts, {args.clients} clients, "
        f"{args.docs_per_request} documents a request",
        "",
        "| measure | value |",
        "|---|---|",
        f"| HTTP documents/s | {report['http']['docs_per_s']} |",
        f"| HTTP chunks/s | {report['http']['chunks_per_s']} |",
        f"| failed requests | {report['http']['failed_requests']} |",
        f"| tokenizer threads of the encoders-alone calls | {report.get('tokenizer_threads', '-')} |",
    ]
    if "ceiling" in report:
        ceiling = report["ceiling"]
        lines += [
            f"| encoders alone through their document lanes, chunks/s | "
            f"{json.dumps(ceiling['chunks_per_s'])} |",
            f"| encoders alone, one batched call, chunks/s | "
            f"{json.dumps(ceiling['batched_chunks_per_s'])} |",
            f"| HTTP / slower encoder ({ceiling['slower_encoder']}, {ceiling['yardstick']}) | "
            f"{report['http_over_slower_encoder']:.1%} |",
        ]
    lines += ["", "Stage seconds (summed over requests): "
              + json.dumps(report["http"]["stage_seconds_summed"])]  # fmt: skip
    write_report(args.out, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
