"""Retrieval quality on a BEIR folder: every strategy and fusion, per store topology.

    python -m benchmarks quality [--beir DIR] [--split test] [--config config/local.yaml]
        [--topologies embedded,opensearch+qdrant] [--max-docs N] [--max-queries N] [--out STEM]

Runs ``serve-app eval`` under each topology (each indexes the corpus once into its own eval
index, reused when it exists): ``embedded``, and ``opensearch+qdrant`` with osmem-server for
the OpenSearch REST API (its BM25 is not Lucene's) and qdrant-client local mode for Qdrant
(exact search). Reports nDCG@10 per run and topology, Recall@100 and MRR@10 under the first,
beside the published SciFact anchors, and plots the first topology's nDCG@10.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.report import beside, default_stem, plot, table, write_report
from benchmarks.service import add_run_arguments

ANCHORS = {  # published nDCG@10 on SciFact (test)
    "BM25 (Anserini)": 0.679,
    "all-MiniLM-L6-v2": 0.645,
    "SPLADE-v3": 0.714,
    "bge-base-en-v1.5": 0.741,
    "BM25 + bge-base RRF": 0.742,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, "--beir")
    parser.add_argument("--split", default="test")
    parser.add_argument("--topologies", default="embedded", help="comma-separated")
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--max-docs", type=int)
    parser.add_argument("--max-queries", type=int)


def evaluate(args: argparse.Namespace, topology: str, out: Path) -> dict[str, Any]:
    """``serve-app eval`` under ``topology``, in a process of its own."""
    command = [sys.executable, "-m", "deployments.cli", "--config", str(args.config), "eval"]
    command += ["--beir", str(args.beir), "--split", args.split, "--depth", str(args.depth)]
    for flag, value in (("--max-docs", args.max_docs), ("--max-queries", args.max_queries)):
        command += [flag, str(value)] if value else []
    env = dict(os.environ)
    print(f"== {topology}", flush=True)
    with contextlib.ExitStack() as stack:
        if topology == "opensearch+qdrant":
            from osmem_server import OsmemServer

            server = stack.enter_context(OsmemServer.start())
            env["SERVE_APP__STORES__TOPOLOGY"] = topology
            env["SERVE_APP__STORES__OPENSEARCH__HOSTS"] = f"[{server.url}]"
            env["SERVE_APP__STORES__OPENSEARCH__NUMBER_OF_REPLICAS"] = "0"
            env["SERVE_APP__STORES__QDRANT__LOCAL_PATH"] = "qdrant-local"
        elif topology != "embedded":
            raise SystemExit(f"no quality run for topology {topology!r}")
        if subprocess.run([*command, "--json", str(out)], env=env).returncode != 0:
            raise SystemExit(f"eval failed under {topology}")
    return json.loads(out.read_text())


def run(args: argparse.Namespace) -> int:
    name = args.beir.name
    stem = args.out or default_stem(f"quality-{name}-{args.split}")
    stem.parent.mkdir(parents=True, exist_ok=True)
    topologies = args.topologies.split(",")
    evals = {
        t: evaluate(args, t, stem.with_name(f"{stem.name}-{t.replace('+', '-')}-eval.json"))
        for t in topologies
    }
    first = evals[topologies[0]]
    results = {t: e["results"] for t, e in evals.items()}
    report = {"dataset": name, "split": args.split, "queries": first["queries"]}
    report.update(documents=first["documents"], anchors=ANCHORS, topologies=results)
    rows = [
        [run, *(results[t].get(run, {}).get("ndcg@10") for t in topologies),
         metrics["recall@100"], metrics["mrr@10"]]
        for run, metrics in results[topologies[0]].items()
    ]  # fmt: skip
    write_report(stem, report, [
        f"# Quality: {name} ({args.split}), {report['queries']} queries, "
        f"{report['documents']} documents",
        "",
        "Published anchors (nDCG@10): " + ", ".join(f"{k} {v}" for k, v in ANCHORS.items()),
        "",
        *table(["run", *(f"nDCG@10 {t}" for t in topologies),
                f"Recall@100 {topologies[0]}", f"MRR@10 {topologies[0]}"], rows),
    ])  # fmt: skip
    plot(beside(stem, ".png"), f"{name} ({args.split}), {topologies[0]}: nDCG@10",
         ("nDCG@10", ""), lambda ax: _draw(ax, results[topologies[0]]),
         size=(9, 0.35 * len(rows) + 1.5))  # fmt: skip
    return 0


def _draw(ax: Any, results: dict[str, dict[str, float]]) -> None:
    names = list(results)
    values = [results[n]["ndcg@10"] for n in names]
    ax.barh(names, values, color=["#4c72b0" if "(" not in n else "#dd8452" for n in names])
    for anchor, value in ANCHORS.items():
        ax.axvline(value, linestyle=":", linewidth=0.8, color="grey")
        ax.text(value, len(names) - 0.4, anchor, rotation=90, fontsize=6, va="top", color="grey")
    ax.invert_yaxis()
    ax.set_xlim(min(values) - 0.05, max(*values, *ANCHORS.values()) + 0.02)
