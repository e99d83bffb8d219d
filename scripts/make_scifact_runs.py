"""Writes tests/data/scifact_runs/: the first 60 queries (100 documents each) of the TREC run
files `serve-app eval` wrote on SciFact's test split, for the metric and fusion tests.

    serve-app --config config/local.yaml eval --beir ../shared/data/scifact --split test
    python scripts/make_scifact_runs.py [.data/local/eval/runs/scifact-test]
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("bm25", "splade", "dense", "default")
QUERIES, DEPTH = 60, 100


def main(source: Path) -> None:
    out = ROOT / "tests" / "data" / "scifact_runs"
    out.mkdir(parents=True, exist_ok=True)
    for name in RUNS:
        lines = (source / f"{name}.trec").read_text().splitlines()
        keep = sorted({line.split()[0] for line in lines}, key=int)[:QUERIES]
        rows = [
            line for line in lines if line.split()[0] in keep and int(line.split()[3]) <= DEPTH
        ]
        # mtime=0: the same runs give the same bytes.
        with gzip.GzipFile(out / f"{name}.trec.gz", "wb", mtime=0) as handle:
            handle.write(("\n".join(rows) + "\n").encode())
        print(f"{name}: {len(keep)} queries, {len(rows)} lines")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / ".data/local/eval/runs/scifact-test")
