"""What the embedded store spends turning the engine's hits into ``Hit``s, against the search.

    python benchmarks/store_hits.py [--chunks 1000] [--batch 8] [--limit 100] [--repeat 200]

Builds an embedded index of ``--chunks`` synthetic chunks (``benchmarks/scale.py``'s vectors),
then times one coalesced batch as the store replica runs it: ``--batch`` queries x two
strategies (dense and SPLADE, which both return ``--limit`` hits here; the synthetic BM25
terms rarely match), in one engine call. Medians of ``--repeat`` runs, on one thread, of

* the engine call alone (``query_batch``, its requests built beforehand);
* the same plus each hit's id read (the engine makes a ``uuid.UUID`` when an id is read):
  the floor of any conversion;
* ``EdgeBackend._query_sync`` (requests built, engine call, hits made) with every id
  formatted anew by ``str``, as before ``IdTexts``;
* the engine call with its hits made one at a time, each attribute read in turn (the
  conversion before ``EdgeBackend._hits``; ids through ``IdTexts``);
* ``EdgeBackend._query_sync`` as it is (ids through ``IdTexts``, all seen before, as under
  load; the hits made column by column).

Per query and per hit. Prints and writes JSON + Markdown under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import qdrant_edge as edge

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.reports import write_report  # noqa: E402
from benchmarks.scale import DIM, TENANT, build, query_vectors, unit  # noqa: E402
from serve_app.config import EmbeddedStoreConfig  # noqa: E402
from serve_app.stores import qdrant_requests as qr  # noqa: E402
from serve_app.stores.base import Hit, IndexModels, StrategyQuery  # noqa: E402
from serve_app.stores.embedded import EdgeBackend, embedded_index  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def median_ms(run: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def batch_queries(batch: int, limit: int, rng: np.random.Generator) -> list[StrategyQuery]:
    dense = unit(rng, batch)
    queries = []
    for q in range(batch):
        vectors = query_vectors(rng, dense[q])
        for strategy in ("dense", "splade"):
            queries.append(StrategyQuery(strategy, vectors, limit, TENANT, None, False))
    return queries


class FormattedAnew:
    """``IdTexts`` without its memory: every id formatted by ``str``, as before it."""

    def __call__(self, point_id: object) -> str:
        return str(point_id)

    def many(self, point_ids: list) -> list[str]:
        return [str(point_id) for point_id in point_ids]


async def measure(args: argparse.Namespace) -> dict:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        index = embedded_index(Path(tmp) / "store", EmbeddedStoreConfig())
        await index.open(IndexModels("bench-dense", DIM, "bench-splade", "bm25"))
        build_s = await build(index, args.chunks, min(args.chunks, 1000), rng)
        backend = index.backends[0]
        assert isinstance(backend, EdgeBackend)
        queries = batch_queries(args.batch, args.limit, rng)
        request = edge.QueryBatchRequest([backend._request(qr.query_plan(q)) for q in queries])
        shard = backend.shard
        hits = sum(len(points) for points in shard.query_batch(request))

        def ids_read() -> None:
            for points in shard.query_batch(request):
                for p in points:
                    p.id  # noqa: B018 - reading it is what is timed

        def query_sync() -> None:
            backend._query_sync(queries)

        def one_hit_at_a_time() -> None:  # the conversion before the column-wise ``_hits``
            id_text = backend._id_text
            for points in shard.query_batch(request):
                [
                    Hit(id_text(p.id), p.payload["doc_id"] if p.payload else "", float(p.score))
                    for p in points
                ]

        id_texts = backend._id_text
        backend._id_text = FormattedAnew()  # type: ignore[assignment]
        anew = median_ms(query_sync, args.repeat)
        backend._id_text = id_texts
        query_sync()  # the ids seen once, as under load
        timings = {
            "engine call": median_ms(lambda: shard.query_batch(request), args.repeat),
            "engine call + ids read": median_ms(ids_read, args.repeat),
            "_query_sync, ids formatted anew": anew,
            "engine call + hits made one at a time (before)": median_ms(
                one_hit_at_a_time, args.repeat
            ),
            "_query_sync, hits made column by column (now)": median_ms(query_sync, args.repeat),
        }
        await index.close()
    return {
        "chunks": args.chunks,
        "batch_queries": args.batch,
        "strategies": 2,
        "limit": args.limit,
        "hits_per_batch": hits,
        "build_s": round(build_s, 2),
        "repeat": args.repeat,
        "timings": {
            name: {
                "batch_ms": round(ms, 3),
                "per_query_ms": round(ms / args.batch, 3),
                "per_hit_us": round(ms * 1000 / max(hits, 1), 3),
            }
            for name, ms in timings.items()
        },
    }


def markdown(report: dict) -> list[str]:
    lines = [
        f"# Embedded store: hits of one batch ({report['batch_queries']} queries x "
        f"{report['strategies']} strategies, {report['hits_per_batch']} hits, "
        f"{report['chunks']} chunks; medians of {report['repeat']})",
        "",
        "| step | batch ms | per query ms | per hit us |",
        "|---|---|---|---|",
    ]
    for name, row in report["timings"].items():
        lines.append(
            f"| {name} | {row['batch_ms']} | {row['per_query_ms']} | {row['per_hit_us']} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS / "store_hits")
    args = parser.parse_args()
    report = asyncio.run(measure(args))
    write_report(args.out, report, markdown(report))


if __name__ == "__main__":
    main()
