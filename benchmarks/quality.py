"""Retrieval quality on a BEIR-layout folder: every strategy and fusion, with a bar plot.

    python benchmarks/quality.py [--beir ../shared/data/scifact] [--split test] [--config config/local.yaml]

Runs ``serve-app eval`` (which indexes the corpus once under data_dir/eval/<name> and reuses
it), then writes JSON + Markdown + PNG under benchmarks/results/ with the published SciFact
anchors in the report header for comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"

ANCHORS = {  # published nDCG@10 on SciFact (test)
    "BM25 (Anserini)": 0.679,
    "all-MiniLM-L6-v2": 0.645,
    "SPLADE-v3": 0.714,
    "bge-base-en-v1.5": 0.741,
    "BM25 + bge-base RRF": 0.742,
}


def plot(results: dict[str, dict[str, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    values = [results[n]["ndcg@10"] for n in names]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(names) + 1.5))
    colors = ["#4c72b0" if "(" not in n else "#dd8452" for n in names]
    ax.barh(names, values, color=colors)
    for anchor, value in ANCHORS.items():
        ax.axvline(value, linestyle=":", linewidth=0.8, color="grey")
        ax.text(value, len(names) - 0.4, anchor, rotation=90, fontsize=6, va="top", color="grey")
    ax.invert_yaxis()
    ax.set_xlim(min(values) - 0.05, max(max(values), max(ANCHORS.values())) + 0.02)
    ax.set_xlabel("nDCG@10")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--beir", default=str(ROOT.parent / "shared" / "data" / "scifact"))
    parser.add_argument("--split", default="test")
    parser.add_argument("--config", default=str(ROOT / "config" / "local.yaml"))
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--max-docs", type=int)
    parser.add_argument("--max-queries", type=int)
    parser.add_argument(
        "--out", help="report stem (default benchmarks/results/quality_<dataset>_<split>)"
    )
    args = parser.parse_args(argv)

    from deployments.cli import main as cli

    name = Path(args.beir).name
    stem = Path(args.out) if args.out else RESULTS / f"quality_{name}_{args.split}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    cli_args = [
        "--config",
        args.config,
        "eval",
        "--beir",
        args.beir,
        "--split",
        args.split,
        "--depth",
        str(args.depth),
        "--json",
        str(stem.with_suffix(".json")),
    ]
    if args.max_docs:
        cli_args += ["--max-docs", str(args.max_docs)]
    if args.max_queries:
        cli_args += ["--max-queries", str(args.max_queries)]
    code = cli(cli_args)
    if code != 0:
        return code
    report = json.loads(stem.with_suffix(".json").read_text())
    results = report["results"]
    plot(
        results, stem.with_suffix(".png"), f"{name} ({args.split}): nDCG@10 per strategy and fusion"
    )
    lines = [
        f"# Quality: {name} ({args.split}), {report['queries']} queries, {report['documents']} documents",
        "",
        "Published anchors (nDCG@10): " + ", ".join(f"{k} {v}" for k, v in ANCHORS.items()),
        "",
        "| run | nDCG@10 | Recall@100 | MRR@10 |",
        "|---|---|---|---|",
        *[
            f"| {n} | {m['ndcg@10']} | {m['recall@100']} | {m['mrr@10']} |"
            for n, m in results.items()
        ],
    ]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"report: {stem.with_suffix('.md')}, plot: {stem.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
