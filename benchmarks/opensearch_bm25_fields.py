"""BM25 field layouts in the OpenSearch REST API (osmem-server): nDCG@10 on whole BEIR
documents for one combined field vs multi_match over separate title/content fields.

    python benchmarks/opensearch_bm25_fields.py [--beir ../shared/data/scifact] [--split test]

Chose the adapter's default (``field_boosts: {body: 1.0}``). Writes
benchmarks/results/opensearch_bm25_fields_<dataset>_<split>.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"

ENGLISH = {"type": "text", "analyzer": "english"}
VARIANTS = {
    "match body (title + text, english)": {"match": {"body": "{q}"}},
    "match body (title + text, standard)": {"match": {"body_std": "{q}"}},
    "cross_fields content + title^2": {
        "multi_match": {"fields": ["content", "title^2"], "type": "cross_fields"}
    },
    "cross_fields content + title": {
        "multi_match": {"fields": ["content", "title"], "type": "cross_fields"}
    },
    "best_fields content + title^2": {
        "multi_match": {"fields": ["content", "title^2"], "type": "best_fields"}
    },
    "most_fields content + title": {
        "multi_match": {"fields": ["content", "title"], "type": "most_fields"}
    },
}


def build_query(variant: dict, text: str) -> dict:
    if "match" in variant:
        (field,) = variant["match"]
        return {"match": {field: text}}
    return {"multi_match": {**variant["multi_match"], "query": text}}


async def run(args: argparse.Namespace) -> dict[str, float]:
    from opensearchpy import AsyncOpenSearch
    from osmem_server import OsmemServer

    from serve_app.evaluation.beir import load_beir
    from serve_app.evaluation.metrics import evaluate_run

    dataset = load_beir(args.beir, args.split, "t")
    properties = {
        "body": ENGLISH,
        "content": ENGLISH,
        "title": ENGLISH,
        "body_std": {"type": "text"},
    }
    results: dict[str, float] = {}
    with OsmemServer.start() as server:
        client = AsyncOpenSearch(hosts=[server.url])
        await client.indices.create(index="docs", body={"mappings": {"properties": properties}})
        lines: list[dict] = []
        for doc in dataset.corpus:
            body = f"{doc.title}\n{doc.text}"
            lines.append({"index": {"_index": "docs", "_id": doc.id}})
            lines.append({"body": body, "body_std": body, "content": doc.text, "title": doc.title})
        for start in range(0, len(lines), 2000):
            await client.bulk(body=lines[start : start + 2000])
        await client.indices.refresh(index="docs")
        query_ids = sorted(dataset.queries)
        for name, variant in VARIANTS.items():
            run = {}
            for query_id in query_ids:
                response = await client.search(
                    index="docs",
                    body={
                        "size": 10,
                        "_source": False,
                        "query": build_query(variant, dataset.queries[query_id]),
                    },
                )
                run[query_id] = [(hit["_id"], hit["_score"]) for hit in response["hits"]["hits"]]
            results[name] = evaluate_run(run, dataset.qrels)["ndcg@10"]
            print(f"{name:<40} {results[name]:.4f}", flush=True)
        await client.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--beir", default=str(ROOT.parent / "shared" / "data" / "scifact"))
    parser.add_argument("--split", default="test")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    results = asyncio.run(run(args))
    stem = Path(args.out) / f"opensearch_bm25_fields_{Path(args.beir).name}_{args.split}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(results, indent=2))
    lines = [
        f"# BM25 field layouts in osmem-server: {Path(args.beir).name} ({args.split}), whole documents",
        "",
        "| layout | nDCG@10 |",
        "|---|---|",
        *[f"| {name} | {value} |" for name, value in results.items()],
    ]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
