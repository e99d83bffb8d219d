"""How search cost in the embedded store grows with index size (synthetic chunks).

    python benchmarks/scale.py [--sizes 10000 100000 1000000] [--queries 200]

For each size: generates chunks with random unit dense vectors (dimension 384, as MiniLM),
SPLADE-like sparse vectors (~120 terms over a 30,522-term vocabulary, Zipf-distributed) and
BM25-like sparse vectors (~60 hashed terms), writes them through the store adapter in
batches, lets the engine build its indexes (HNSW for dense), then times single-query search
per strategy (top 100, tenant filter) and the three together. Nothing is encoded: this
isolates the store. Prints and writes JSON + Markdown + PNG under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.reports import write_report  # noqa: E402
from serve_app.config import EmbeddedStoreConfig  # noqa: E402
from serve_app.schemas import Chunk, SparseVector  # noqa: E402
from serve_app.stores.base import DocumentWrite, EncodedChunk, IndexModels, QueryVectors  # noqa: E402
from serve_app.stores.embedded import embedded_index  # noqa: E402
from serve_app.stores.index import StoreIndex  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DIM, VOCAB, HASH_SPACE = 384, 30522, 2**31
TENANT = "bench"


def sparse(rng: np.random.Generator, terms: int, space: int, zipf: bool) -> SparseVector:
    ids = (rng.zipf(1.3, terms * 2) % space) if zipf else rng.integers(0, space, terms * 2)
    unique = np.unique(ids)[:terms]
    return SparseVector(
        indices=[int(i) for i in unique], values=[float(v) for v in rng.random(len(unique)) + 0.1]
    )


def query_vectors(rng: np.random.Generator, dense: np.ndarray) -> QueryVectors:
    """A synthetic query: ``dense`` plus SPLADE-like and BM25-like terms."""
    return QueryVectors(
        text="q",
        dense=dense,
        splade=sparse(rng, 30, VOCAB, True),
        bm25=sparse(rng, 8, HASH_SPACE, False),
    )


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


async def build(index: StoreIndex, size: int, batch: int, rng: np.random.Generator) -> float:
    start = time.perf_counter()
    for offset in range(0, size, batch):
        count = min(batch, size - offset)
        dense = unit(rng, count)
        writes = []
        for i in range(count):
            n = offset + i
            chunk = Chunk.model_construct(
                id=f"00000000-0000-4000-8000-{n:012d}",
                doc_id=f"d{n}",
                tenant_id=TENANT,
                text=f"chunk {n}",
                title="",
                section="",
                heading_chain=[],
                order=0,
                char_start=0,
                char_end=8,
                metadata={},
                source=None,
            )
            writes.append(
                DocumentWrite(
                    doc_id=f"d{n}",
                    content_hash="h",
                    chunks=[
                        EncodedChunk(
                            chunk,
                            dense[i],
                            sparse(rng, 120, VOCAB, True),
                            sparse(rng, 60, HASH_SPACE, False),
                        )
                    ],
                )
            )
        await index.write_documents(TENANT, writes)
    index.backends[0].shard.optimize()  # build HNSW and the sparse indexes before timing searches
    return time.perf_counter() - start


async def time_queries(
    index: StoreIndex, queries: int, rng: np.random.Generator
) -> dict[str, dict[str, float]]:
    vectors = unit(rng, queries)
    out: dict[str, dict[str, float]] = {}
    samples: dict[str, list[float]] = {"dense": [], "splade": [], "bm25": [], "all three": []}
    for q in range(queries):
        query = query_vectors(rng, vectors[q])
        for strategy in ("dense", "splade", "bm25"):
            start = time.perf_counter()
            await index.search(strategy, query, 100, TENANT)
            samples[strategy].append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        await asyncio.gather(
            *(index.search(s, query, 100, TENANT) for s in ("dense", "splade", "bm25"))
        )
        samples["all three"].append((time.perf_counter() - start) * 1000)
    for name, values in samples.items():
        ordered = sorted(values)
        out[name] = {
            "p50_ms": round(statistics.median(values), 2),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
        }
    return out


async def run(args: argparse.Namespace) -> dict:
    rng = np.random.default_rng(7)
    report: dict = {"dimension": DIM, "top_k": 100, "sizes": {}}
    for size in args.sizes:
        folder = tempfile.mkdtemp(prefix=f"bench-scale-{size}-")
        index = embedded_index(folder, EmbeddedStoreConfig())
        await index.open(IndexModels("synthetic", DIM, "synthetic-splade", "synthetic-bm25"))
        build_s = await build(index, size, args.batch, rng)
        timings = await time_queries(index, args.queries, rng)
        disk_mb = sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) / 2**20
        await index.close()
        report["sizes"][str(size)] = {
            "build_s": round(build_s, 1),
            "disk_mb": round(disk_mb, 1),
            **timings,
        }
        print(
            f"{size:>9} chunks: build {build_s:7.1f} s, disk {disk_mb:8.1f} MB, "
            + ", ".join(
                f"{k} p50 {v['p50_ms']} / p95 {v['p95_ms']} ms" for k, v in timings.items()
            ),
            flush=True,
        )
    return report


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(s) for s in report["sizes"]]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in ("dense", "splade", "bm25", "all three"):
        ax.plot(
            sizes,
            [report["sizes"][str(s)][name]["p95_ms"] for s in sizes],
            marker="o",
            label=f"{name} p95",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunks in the index")
    ax.set_ylabel("search latency (ms)")
    ax.set_title("Embedded store: search latency vs index size (top 100)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--out", type=Path, default=RESULTS / "scale")
    args = parser.parse_args(argv)
    report = asyncio.run(run(args))
    plot(report, args.out.with_suffix(".png"))
    lines = [
        "# Embedded store at scale (synthetic chunks, 384-d dense + SPLADE-like + BM25-like sparse)",
        "",
        "| chunks | build s | disk MB | dense p50/p95 ms | splade p50/p95 ms | bm25 p50/p95 ms | all three p50/p95 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, row in report["sizes"].items():
        cells = " | ".join(
            f"{row[k]['p50_ms']} / {row[k]['p95_ms']}"
            for k in ("dense", "splade", "bm25", "all three")
        )
        lines.append(f"| {int(size):,} | {row['build_s']} | {row['disk_mb']} | {cells} |")
    write_report(args.out, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
