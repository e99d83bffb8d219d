"""Retrieval quality per store topology: ``serve-app eval`` on the same BEIR folder under
``embedded`` and ``opensearch+qdrant`` (osmem-server for the OpenSearch REST API, qdrant-client
local mode for Qdrant), side by side.

    python benchmarks/topologies.py [--beir ../shared/data/scifact] [--split test]

Each topology indexes the corpus into its own eval index (re-encoding it: about 11 minutes for
SciFact on 2 cores); the embedded one is reused when it exists. Writes
benchmarks/results/topologies_<dataset>_<split>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"


def run_eval(args: argparse.Namespace, topology: str, out: Path, env: dict[str, str]) -> dict:
    from deployments.cli import main as cli

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        cli_args = ["--config", args.config, "eval", "--beir", args.beir, "--split", args.split]
        cli_args += ["--depth", str(args.depth), "--json", str(out)]
        if args.max_docs:
            cli_args += ["--max-docs", str(args.max_docs)]
        if args.max_queries:
            cli_args += ["--max-queries", str(args.max_queries)]
        print(f"== {topology}", flush=True)
        if cli(cli_args) != 0:
            raise SystemExit(f"eval failed under {topology}")
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return json.loads(out.read_text())


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
    parser.add_argument("--data-dir", help="data_dir for both runs (default: the config's)")
    args = parser.parse_args(argv)

    from osmem_server import OsmemServer

    name = Path(args.beir).name
    stem = RESULTS / f"topologies_{name}_{args.split}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    base = {"SERVE_APP__DATA_DIR": args.data_dir} if args.data_dir else {}
    reports = {"embedded": run_eval(args, "embedded", stem.with_suffix(".embedded.json"), base)}
    with OsmemServer.start() as server:
        env = {
            **base,
            "SERVE_APP__STORES__TOPOLOGY": "opensearch+qdrant",
            "SERVE_APP__STORES__OPENSEARCH__HOSTS": f"[{server.url}]",
            "SERVE_APP__STORES__OPENSEARCH__NUMBER_OF_REPLICAS": "0",
            "SERVE_APP__STORES__QDRANT__LOCAL_PATH": "qdrant-local",
        }
        split = stem.with_suffix(".opensearch_qdrant.json")
        reports["opensearch+qdrant"] = run_eval(args, "opensearch+qdrant", split, env)

    runs = list(reports["embedded"]["results"])
    lines = [
        f"# nDCG@10 per topology: {name} ({args.split}), {reports['embedded']['queries']} queries",
        "",
        "OpenSearch here is osmem-server (the OpenSearch REST API; its BM25 is not Lucene's), "
        "Qdrant is qdrant-client local mode (exact search).",
        "",
        "| run | embedded | opensearch+qdrant |",
        "|---|---|---|",
    ]
    table = {}
    for run in runs:
        row = {t: r["results"].get(run, {}).get("ndcg@10") for t, r in reports.items()}
        table[run] = row
        lines.append(f"| {run} | {row['embedded']} | {row['opensearch+qdrant']} |")
        print(f"{run:<32} {row['embedded']}  {row['opensearch+qdrant']}")
    stem.with_suffix(".json").write_text(json.dumps(table, indent=2))
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"report: {stem.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
