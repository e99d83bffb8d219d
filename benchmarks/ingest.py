"""Ingest throughput in-process against the raw throughput of each encoder (the ceiling).

    python benchmarks/ingest.py --corpus scifact [--max-docs N] [--config config/local.yaml]
    python benchmarks/ingest.py --corpus plos --chunker imrad

Steps, all in one process on one machine:
1. the whole ingest pipeline (load -> chunk -> encode dense + sparse -> write) into a fresh
   index, in batches as the CLI does; documents/s, chunks/s, peak RSS;
2. a second ingest of the same documents (content-hash skip: no model work);
3. each encoder alone over exactly the chunk texts the ingest encoded (same batching): the
   per-chunk cost of dense, SPLADE and BM25; their sum is the ceiling for chunks/s;
4. single-query encode latency per model (median of 50).
Prints the figures and writes JSON + Markdown under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.reports import write_report  # noqa: E402
from serve_app.config import load_config  # noqa: E402
from serve_app.evaluation.beir import load_beir  # noqa: E402
from serve_app.loaders import load_file  # noqa: E402
from serve_app.pipelines.components import build_components  # noqa: E402
from serve_app.pipelines.ingest import IngestPipeline, encoding_text  # noqa: E402
from serve_app.schemas import Document  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_corpus(name: str, max_docs: int | None) -> list[Document]:
    if name == "scifact":
        docs = load_beir(SHARED / "scifact", "test", "default").corpus
    elif name == "plos":
        docs = [load_file(p) for p in sorted((SHARED / "plos_fulltext").glob("*.xml"))]
    else:
        raise SystemExit(f"unknown corpus {name!r}")
    return docs[:max_docs] if max_docs else docs


async def run(args: argparse.Namespace) -> dict:
    config = load_config(args.config)
    data_dir = tempfile.mkdtemp(prefix="bench-ingest-")
    update: dict = {"data_dir": data_dir}
    if args.chunker:
        update["chunker"] = config.chunker.model_copy(update={"name": args.chunker})
    config = config.model_copy(update=update)
    documents = load_corpus(args.corpus, args.max_docs)
    components = await build_components(config)
    pipeline = IngestPipeline(components)
    report: dict = {
        "corpus": args.corpus,
        "documents": len(documents),
        "chunker": config.chunker.name,
        "batch_size": args.batch_size,
        "cpus": os.cpu_count(),
    }
    try:
        # Warm-up on a copy under another tenant so first-call costs stay out of the figures.
        warm = [d.model_copy(update={"tenant_id": "warmup"}) for d in documents[:4]]
        await pipeline.ingest(warm)

        stages: dict[str, float] = {}
        start = time.perf_counter()
        chunks = 0
        for i in range(0, len(documents), args.batch_size):
            result = await pipeline.ingest(documents[i : i + args.batch_size])
            chunks += result.chunks_written
            for stage, ms in result.timings_ms.items():
                stages[stage] = stages.get(stage, 0.0) + ms
        elapsed = time.perf_counter() - start
        count = await components.index.count("default")
        report["ingest"] = {
            "seconds": round(elapsed, 2),
            "docs_per_s": round(len(documents) / elapsed, 2),
            "chunks": chunks,
            "chunks_per_doc": round(chunks / len(documents), 2),
            "chunks_per_s": round(chunks / elapsed, 2),
            "stage_seconds": {k: round(v / 1000, 2) for k, v in sorted(stages.items())},
            "peak_rss_mb": round(peak_rss_mb(), 1),
        }

        start = time.perf_counter()
        unchanged = 0
        for i in range(0, len(documents), args.batch_size):
            unchanged += len((await pipeline.ingest(documents[i : i + args.batch_size])).unchanged)
        report["reingest"] = {
            "seconds": round(time.perf_counter() - start, 2),
            "unchanged": unchanged,
            "chunk_count_before": count,
            "chunk_count_after": await components.index.count("default"),
        }

        # The ceiling: each encoder alone over the very texts the ingest encoded.
        all_chunks = [c for d in documents for c in components.chunker.chunk(d)]
        texts = [encoding_text(c, config.chunker.contextual_header) for c in all_chunks]
        per_chunk_ms: dict[str, float] = {}
        start = time.perf_counter()
        await components.dense.embed_documents(texts)
        per_chunk_ms["dense"] = (time.perf_counter() - start) * 1000 / len(texts)
        for name, encoder in components.sparse.items():
            start = time.perf_counter()
            await encoder.encode_documents(texts)
            per_chunk_ms[name] = (time.perf_counter() - start) * 1000 / len(texts)
        ceiling = 1000 / sum(per_chunk_ms.values())
        report["encoders"] = {
            "per_chunk_ms": {k: round(v, 3) for k, v in per_chunk_ms.items()},
            "chunks_per_s_alone": {k: round(1000 / v, 2) for k, v in per_chunk_ms.items()},
            "ceiling_chunks_per_s": round(ceiling, 2),
            "ingest_share_of_ceiling": round(report["ingest"]["chunks_per_s"] / ceiling, 3),
        }

        latencies: dict[str, float] = {}
        queries = [d.title or d.id for d in documents[:50]]
        for name, call in (
            ("dense", lambda q: components.dense.embed_queries([q])),
            *(
                (n, (lambda enc: lambda q: enc.encode_queries([q]))(e))
                for n, e in components.sparse.items()
            ),
        ):
            samples = []
            for query in queries:
                start = time.perf_counter()
                await call(query)
                samples.append((time.perf_counter() - start) * 1000)
            latencies[name] = round(statistics.median(samples), 2)
        report["query_encode_ms_median"] = latencies
        report["peak_rss_mb"] = round(peak_rss_mb(), 1)
    finally:
        await components.close()
    return report


def markdown(report: dict) -> str:
    ingest, enc = report["ingest"], report["encoders"]
    lines = [
        f"# Ingest benchmark: {report['corpus']} ({report['documents']} documents, chunker {report['chunker']})",
        "",
        "| measure | value |",
        "|---|---|",
        f"| ingest documents/s | {ingest['docs_per_s']} |",
        f"| ingest chunks/s | {ingest['chunks_per_s']} |",
        f"| chunks per document | {ingest['chunks_per_doc']} |",
        f"| ceiling chunks/s (sum of encoder costs) | {enc['ceiling_chunks_per_s']} |",
        f"| ingest / ceiling | {enc['ingest_share_of_ceiling']:.1%} |",
        f"| re-ingest (unchanged) seconds | {report['reingest']['seconds']} |",
        f"| chunk count before / after re-ingest | {report['reingest']['chunk_count_before']} / {report['reingest']['chunk_count_after']} |",
        f"| peak RSS MB | {report['peak_rss_mb']} |",
        "",
        "| encoder | ms per chunk | chunks/s alone | query encode ms (median) |",
        "|---|---|---|---|",
    ]
    for name, ms in enc["per_chunk_ms"].items():
        lines.append(
            f"| {name} | {ms} | {enc['chunks_per_s_alone'][name]} | {report['query_encode_ms_median'].get(name, '-')} |"
        )
    lines += ["", "Stage seconds inside the ingest: " + json.dumps(ingest["stage_seconds"])]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", choices=["scifact", "plos"], default="scifact")
    parser.add_argument("--max-docs", type=int)
    parser.add_argument("--chunker", choices=["sliding_window", "sections", "imrad"])
    parser.add_argument("--config", default=str(ROOT / "config" / "local.yaml"))
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--out", help="report path stem (default: benchmarks/results/ingest_<corpus>_<chunker>)"
    )
    args = parser.parse_args()
    report = asyncio.run(run(args))
    stem = (
        Path(args.out) if args.out else RESULTS / f"ingest_{report['corpus']}_{report['chunker']}"
    )
    write_report(stem, report, markdown(report))


if __name__ == "__main__":
    main()
