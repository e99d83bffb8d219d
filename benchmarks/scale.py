"""How search cost in the embedded store grows with index size (synthetic chunks).

    python -m benchmarks scale [--sizes 10000 100000 1000000] [--queries 200] [--batch 5000]

For each size: chunks with random unit dense vectors (384 dimensions, as MiniLM), SPLADE-like
sparse vectors (~120 terms over a 30,522-term vocabulary, Zipf-distributed) and BM25-like
sparse vectors (~60 hashed terms), written through the store adapter in batches; the
engine's indexes built (HNSW for dense); then single-query search per strategy (top 100,
tenant filter) and the three together. Nothing is encoded: this isolates the store.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.report import default_stem, table, write_report
from benchmarks.runner import percentile
from benchmarks.service import TENANT, fresh_workdir

if TYPE_CHECKING:
    from serve_app.stores.index import StoreIndex
    from serve_app.stores.protocols import IndexMaintenance

DIM, VOCAB, HASH_SPACE = 384, 30522, 2**31
STRATEGIES = ("dense", "splade", "bm25")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--out", type=Path, help="report stem (default: dated, under results)")


def sparse(rng: np.random.Generator, terms: int, space: int, zipf: bool) -> Any:
    from serve_app.schemas import SparseVector

    ids = (rng.zipf(1.3, terms * 2) % space) if zipf else rng.integers(0, space, terms * 2)
    unique = np.unique(ids)[:terms]
    return SparseVector(
        indices=[int(i) for i in unique], values=[float(v) for v in rng.random(len(unique)) + 0.1]
    )


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


async def build(index: StoreIndex, size: int, batch: int, rng: np.random.Generator) -> float:
    from serve_app.schemas import Chunk, ScopeKey
    from serve_app.stores.values import DocumentWrite, EncodedChunk

    start = time.perf_counter()
    for offset in range(0, size, batch):
        count = min(batch, size - offset)
        dense = unit(rng, count)
        writes = []
        for i, n in enumerate(range(offset, offset + count)):
            chunk = Chunk.model_construct(
                id=f"00000000-0000-4000-8000-{n:012d}", doc_id=f"d{n}",
                text=f"chunk {n}", title="", section="", heading_chain=[], order=0,
                char_start=0, char_end=8, metadata={}, source=None,
            )  # fmt: skip
            encoded = EncodedChunk(
                chunk, dense[i], sparse(rng, 120, VOCAB, True), sparse(rng, 60, HASH_SPACE, False)
            )
            writes.append(DocumentWrite(doc_id=f"d{n}", content_hash="h", chunks=[encoded]))
        await index.write_documents(ScopeKey(TENANT), writes)
    index.backends[0].connection.shard.optimize()  # build HNSW and the sparse indexes before timing searches
    return time.perf_counter() - start


async def time_queries(
    index: IndexMaintenance, queries: int, rng: np.random.Generator
) -> dict[str, dict]:
    from serve_app.schemas import ScopeKey
    from serve_app.stores.values import QueryVectors

    samples: dict[str, list[float]] = {name: [] for name in (*STRATEGIES, "all three")}
    for dense in unit(rng, queries):
        query = QueryVectors(
            text="q", dense=dense, splade=sparse(rng, 30, VOCAB, True),
            bm25=sparse(rng, 8, HASH_SPACE, False),
        )  # fmt: skip
        for strategy in STRATEGIES:
            start = time.perf_counter()
            await index.search(strategy, query, 100, ScopeKey(TENANT))
            samples[strategy].append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        await asyncio.gather(*(index.search(s, query, 100, ScopeKey(TENANT)) for s in STRATEGIES))
        samples["all three"].append((time.perf_counter() - start) * 1000)
    return {
        name: {"p50_ms": round(statistics.median(v), 2), "p95_ms": round(percentile(v, 95), 2)}
        for name, v in samples.items()
    }


async def measure(args: argparse.Namespace) -> dict:
    from serve_app.config import EmbeddedStoreConfig
    from serve_app.stores.embedded import embedded_index
    from serve_app.stores.values import IndexModels

    rng = np.random.default_rng(7)
    report: dict = {"dimension": DIM, "top_k": 100, "sizes": {}}
    for size in args.sizes:
        folder = fresh_workdir(f"scale-{size}")
        index = embedded_index(str(folder), EmbeddedStoreConfig())
        await index.open(IndexModels("synthetic", DIM, "synthetic-splade", "synthetic-bm25"))
        build_s = await build(index, size, args.batch, rng)
        timings = await time_queries(index, args.queries, rng)
        disk_mb = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20
        await index.close()
        report["sizes"][str(size)] = {
            "build_s": round(build_s, 1),
            "disk_mb": round(disk_mb, 1),
            **timings,
        }
        print(f"{size:>9} chunks: build {build_s:7.1f} s, {timings}", flush=True)
    return report


def run(args: argparse.Namespace) -> int:
    report = asyncio.run(measure(args))
    stem = args.out or default_stem("scale")
    names = (*STRATEGIES, "all three")
    write_report(stem, report, [
        "# Embedded store at scale (synthetic chunks: 384-d dense, SPLADE-like and BM25-like "
        "sparse vectors)",
        "",
        *table(
            ["chunks", "build s", "disk MB", *(f"{n} p50 / p95 ms" for n in names)],
            [[f"{int(size):,}", row["build_s"], row["disk_mb"],
              *(f"{row[n]['p50_ms']} / {row[n]['p95_ms']}" for n in names)]
             for size, row in report["sizes"].items()],
        ),
    ])  # fmt: skip
    return 0
