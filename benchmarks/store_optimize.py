"""The embedded store's search before and after qdrant-edge's optimizer has run.

    python benchmarks/store_optimize.py [--chunks 20000] [--batch 8] [--repeat 50]
    python benchmarks/store_optimize.py --index .data/local/eval/scifact   # an index of yours

qdrant-edge runs no optimizer by itself: what the store writes can stay in the appendable
segment, where dense search scans every vector, until ``EdgeShard.optimize()`` builds the
HNSW graph (the SciFact index that ``serve-app eval`` writes stays so; these synthetic
writes were optimized as they went). This copies an existing embedded index (``--index``,
queries made from its own stored vectors: dense as stored, SPLADE's 64 and BM25's 12
heaviest terms) or builds one of ``--chunks`` synthetic chunks (``benchmarks/scale.py``'s
vectors, 384 dimensions) through the store's write path, closes it, then times one
search-path batch (``--batch`` queries x bm25, splade and dense, 100 candidates each, no
payload) on

* the shard as the writes left it (loaded with ``EdgeShard.load`` alone);
* the shard as the store opens it (``attach``, which optimizes before it serves),

and how long ``attach`` took while another thread of the process tried to run a 1 ms timer
loop: the longest gap between its ticks says how long the optimizer kept every other Python
thread of the process (a serving replica's event loop) from running. Medians of
``--repeat`` runs on one thread; prints and writes JSON + Markdown under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import qdrant_edge as edge

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.reports import write_report  # noqa: E402
from benchmarks.scale import DIM, TENANT, build, query_vectors, unit  # noqa: E402
from benchmarks.store_hits import median_ms  # noqa: E402
from serve_app.config import EmbeddedStoreConfig  # noqa: E402
from serve_app.schemas import SparseVector  # noqa: E402
from serve_app.stores import qdrant_requests as qr  # noqa: E402
from serve_app.stores.base import IndexModels, QueryVectors, StrategyQuery  # noqa: E402
from serve_app.stores.embedded import SHARD_DIR, EdgeBackend, embedded_index  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
MODELS = IndexModels("bench-dense", DIM, "bench-splade", "bm25")
STRATEGIES = ("bm25", "splade", "dense")


def search_batch(batch: int, rng: np.random.Generator) -> list[StrategyQuery]:
    dense = unit(rng, batch)
    return [
        StrategyQuery(strategy, query_vectors(rng, dense[q]), 100, TENANT, None, False)
        for q in range(batch)
        for strategy in STRATEGIES
    ]


def heaviest(vector: edge.SparseVector, terms: int) -> SparseVector:
    pairs = sorted(zip(vector.values, vector.indices, strict=True), reverse=True)[:terms]
    return SparseVector(indices=[i for _, i in pairs], values=[v for v, _ in pairs])


def stored_batch(shard_path: Path, batch: int) -> list[StrategyQuery]:
    """Queries made of the first stored points' own vectors, in their own tenant."""
    shard = edge.EdgeShard.load(str(shard_path))
    points, _ = shard.scroll(edge.ScrollRequest(limit=batch, with_payload=True, with_vector=True))
    shard.close()
    queries = []
    for point in points:
        stored = point.vector
        vectors = QueryVectors(
            text="q",
            dense=np.asarray(stored["dense"], dtype=np.float32),
            splade=heaviest(stored["splade"], 64),
            bm25=heaviest(stored["bm25"], 12),
        )
        tenant = point.payload["tenant_id"]
        queries += [StrategyQuery(s, vectors, 100, tenant, None, False) for s in STRATEGIES]
    return queries


def timed_batch(shard: edge.EdgeShard, backend: EdgeBackend, queries: list, repeat: int) -> dict:
    request = edge.QueryBatchRequest([backend._request(qr.query_plan(q)) for q in queries])
    shard.query_batch(request)
    batch_ms = median_ms(lambda: shard.query_batch(request), repeat)
    info = shard.info()
    return {
        "segments": info.segments_count,
        "points": info.points_count,
        "indexed_vectors": info.indexed_vectors_count,
        "batch_ms": round(batch_ms, 3),
    }


class Ticker:
    """A 1 ms timer loop on its own thread; the longest gap between ticks is the stall."""

    def __init__(self) -> None:
        self.gaps: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            self.gaps.append(now - last)
            last = now

    def __enter__(self) -> Ticker:
        self._thread.start()
        time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def prepare_index(path: Path, args: argparse.Namespace) -> tuple[float, list[StrategyQuery]]:
    """A closed index at ``path`` (a copy of ``args.index``, or ``args.chunks`` synthetic chunks
    written through the store) and one search batch for it; the build's seconds (0 for a copy)."""
    rng = np.random.default_rng(0)
    if args.index:
        shutil.copytree(args.index, path)
        return 0.0, stored_batch(path / SHARD_DIR, args.batch)
    index = embedded_index(path, EmbeddedStoreConfig())
    await index.open(MODELS)
    build_s = await build(index, args.chunks, 1000, rng)
    await index.close()
    return build_s, search_batch(args.batch, rng)


async def measure(args: argparse.Namespace) -> dict:
    config = EmbeddedStoreConfig()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store"
        build_s, queries = await prepare_index(path, args)
        backend = EdgeBackend(path, config)

        raw_copy = Path(tmp) / "as-written"
        shutil.copytree(path / SHARD_DIR, raw_copy)
        raw = edge.EdgeShard.load(str(raw_copy))
        before = timed_batch(raw, backend, queries, args.repeat)
        raw.close()

        reopened = embedded_index(path, config)
        with Ticker() as ticker:
            started = time.perf_counter()
            await reopened.attach()
            attach_s = time.perf_counter() - started
        opened = reopened.backends[0]
        assert isinstance(opened, EdgeBackend)
        after = timed_batch(opened.shard, backend, queries, args.repeat)
        await reopened.close()
    return {
        "index": str(args.index) if args.index else "synthetic",
        "chunks": before["points"],
        "batch_queries": args.batch,
        "strategies": 3,
        "repeat": args.repeat,
        "build_s": round(build_s, 2),
        "attach_s": round(attach_s, 2),
        "longest_stall_ms": round(max(ticker.gaps) * 1000, 1),
        "as_written": before,
        "as_opened": after,
        "per_query_ms": {
            "as_written": round(before["batch_ms"] / args.batch, 3),
            "as_opened": round(after["batch_ms"] / args.batch, 3),
        },
    }


def markdown(report: dict) -> list[str]:
    lines = [
        f"# Embedded store: one search batch ({report['batch_queries']} queries x "
        f"{report['strategies']} strategies, 100 candidates) over {report['chunks']} points "
        f"({report['index']}), medians of {report['repeat']}",
        "",
        "| shard | segments | indexed vectors | batch ms | per query ms |",
        "|---|---|---|---|---|",
    ]
    for name in ("as_written", "as_opened"):
        row = report[name]
        lines.append(
            f"| {name.replace('_', ' ')} | {row['segments']} | {row['indexed_vectors']} of "
            f"{3 * row['points']} | {row['batch_ms']} | {report['per_query_ms'][name]} |"
        )
    lines += [
        "",
        f"Build (store write path; 0 for a copied index) {report['build_s']} s; `attach` (load + optimize) "
        f"{report['attach_s']} s, during which another thread's 1 ms timer loop was held up "
        f"for at most {report['longest_stall_ms']} ms.",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--index", type=Path, help="an embedded index directory to copy")
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--out", type=Path, default=RESULTS / "store_optimize")
    args = parser.parse_args()
    report = asyncio.run(measure(args))
    write_report(args.out, report, markdown(report))


if __name__ == "__main__":
    main()
