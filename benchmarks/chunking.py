"""Chunks per document for every chunker on a folder of files (default: the 122 PLOS articles).

    python benchmarks/chunking.py [--folder ../shared/data/plos_fulltext] [--config config/local.yaml]

Loads every file, chunks it with each registered chunker at the configured size, checks that
chunking twice gives the same ids (what makes re-ingest leave the chunk count unchanged), and
writes JSON + Markdown under benchmarks/results/. No model runs: chunking only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.reports import write_report  # noqa: E402
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
    args = parser.parse_args(argv)
    config = load_config(args.config)
    documents = [load_file(p) for p in iter_files([args.folder])]
    report: dict = {
        "documents": len(documents),
        "max_tokens": config.chunker.max_tokens,
        "chunkers": {},
    }
    build_chunker(config)  # registers the built-in chunkers
    for name in CHUNKERS.names():
        chunker = build_chunker(
            config.model_copy(update={"chunker": config.chunker.model_copy(update={"name": name})})
        )
        start = time.perf_counter()
        per_doc = [chunker.chunk(d) for d in documents]
        seconds = time.perf_counter() - start
        again = [chunker.chunk(d) for d in documents]
        same_ids = [c.id for cs in per_doc for c in cs] == [c.id for cs in again for c in cs]
        counts = [len(cs) for cs in per_doc]
        report["chunkers"][name] = {
            "chunks": sum(counts),
            "chunks_per_doc_mean": round(statistics.fmean(counts), 1),
            "chunks_per_doc_median": statistics.median(counts),
            "chunks_per_doc_max": max(counts),
            "seconds": round(seconds, 1),
            "same_ids_on_rechunk": same_ids,
        }
        print(name, report["chunkers"][name], flush=True)
    lines = [
        f"# Chunking {report['documents']} documents at {report['max_tokens']} tokens",
        "",
        "| chunker | chunks | per doc (mean / median / max) | seconds | same ids when re-chunked |",
        "|---|---|---|---|---|",
        *[
            f"| {n} | {r['chunks']} | {r['chunks_per_doc_mean']} / {r['chunks_per_doc_median']} / "
            f"{r['chunks_per_doc_max']} | {r['seconds']} | {r['same_ids_on_rechunk']} |"
            for n, r in report["chunkers"].items()
        ],
    ]
    write_report(args.out, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
