"""Chunks per document for every chunker on a folder of files (default: the 122 PLOS articles).

    python benchmarks/chunking.py [--folder ../shared/data/plos_fulltext] [--config config/local.yaml]
        [--batch 100] [--tokenizer-threads 1] [--chunkers sliding_window,...]

Loads every file, chunks it with each registered chunker at the configured size, checks that
chunking twice gives the same ids (what makes re-ingest leave the chunk count unchanged), and
writes JSON + Markdown under benchmarks/results/. No model runs: chunking only. Times each
chunker one document a call and as the service calls it (``chunk_batch`` over ``--batch``
documents, what a ``chunk_many`` call runs), tokenizing on ``--tokenizer-threads`` threads (a
chunker replica's reserved CPUs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # as serve-app; see --tokenizer-threads

from benchmarks.reports import write_report  # noqa: E402
from deployments.tokenizer_threads import tokenize_on_reserved_cpus  # noqa: E402
from serve_app.chunking.base import CHUNKERS  # noqa: E402
from serve_app.config import load_config  # noqa: E402
from serve_app.loaders import iter_files, load_file  # noqa: E402
from serve_app.pipelines.components import build_chunker  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--folder", default=str(ROOT.parent / "shared" / "data" / "plos_fulltext"))
    parser.add_argument("--config", default=str(ROOT / "config" / "local.yaml"))
    parser.add_argument("--out", type=Path, default=RESULTS / "chunking_plos")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--chunkers", help="comma-separated names (default: every chunker)")
    parser.add_argument("--tokenizer-threads", type=int, default=1)
    args = parser.parse_args(argv)
    tokenize_on_reserved_cpus(args.tokenizer_threads)
    config = load_config(args.config)
    documents = [load_file(p) for p in iter_files([args.folder])]
    report: dict = {
        "documents": len(documents),
        "batch": args.batch,
        "tokenizer_threads": args.tokenizer_threads,
        "max_tokens": config.chunker.max_tokens,
        "chunkers": {},
    }
    build_chunker(config)  # registers the built-in chunkers
    names = args.chunkers.split(",") if args.chunkers else CHUNKERS.names()
    for name in names:
        chunker = build_chunker(
            config.model_copy(update={"chunker": config.chunker.model_copy(update={"name": name})})
        )
        start = time.perf_counter()
        per_doc = [chunker.chunk(d) for d in documents]
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        again = [
            chunks
            for i in range(0, len(documents), args.batch)
            for chunks in chunker.chunk_batch(documents[i : i + args.batch])
        ]
        batch_seconds = time.perf_counter() - start
        same_ids = [c.id for cs in per_doc for c in cs] == [c.id for cs in again for c in cs]
        counts = [len(cs) for cs in per_doc]
        report["chunkers"][name] = {
            "chunks": sum(counts),
            "chunks_per_doc_mean": round(statistics.fmean(counts), 1),
            "chunks_per_doc_median": statistics.median(counts),
            "chunks_per_doc_max": max(counts),
            "seconds": round(seconds, 2),
            "batched_seconds": round(batch_seconds, 2),
            "same_ids_on_rechunk": same_ids,
        }
        print(name, report["chunkers"][name], flush=True)
    lines = [
        f"# Chunking {report['documents']} documents at {report['max_tokens']} tokens",
        "",
        f"Tokenizer threads {report['tokenizer_threads']}; batched: `chunk_batch` over "
        f"{report['batch']} documents a call.",
        "",
        "| chunker | chunks | per doc (mean / median / max) | seconds, one document a call | "
        "seconds, batched | same ids when re-chunked in batches |",
        "|---|---|---|---|---|---|",
        *[
            f"| {n} | {r['chunks']} | {r['chunks_per_doc_mean']} / {r['chunks_per_doc_median']} / "
            f"{r['chunks_per_doc_max']} | {r['seconds']} | {r['batched_seconds']} | "
            f"{r['same_ids_on_rechunk']} |"
            for n, r in report["chunkers"].items()
        ],
    ]
    write_report(args.out, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
