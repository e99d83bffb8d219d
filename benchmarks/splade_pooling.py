"""SPLADE query batches on a CPU: only the real tokens projected onto the vocabulary (packed,
what a CPU does) against every padded position projected and padding zeroed (what a GPU does).

    python benchmarks/splade_pooling.py [--tiny] [--batches 1,4,8,16] [--seconds 3]

Batches of consecutive SciFact test claims, encoded by ``SpladeEncoder.encode_with_stats`` on
one torch thread (a replica's share of a core), each way in turn for ``--seconds``; reports the
padding share of each batch size and the median milliseconds per batch of each way. ``--tiny``
uses the tiny random SPLADE of ``benchmarks/serving_path.py`` (1 layer, hidden 32, the real
vocabulary), otherwise the configuration's model (the small real SPLADE).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.load import load_queries  # noqa: E402
from benchmarks.reports import write_report  # noqa: E402
from serve_app.config import load_config  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"


def timed(encoder, batches: list[list[str]], top_k: int, seconds: float) -> float:
    """Median milliseconds per batch, cycling through ``batches`` for ``seconds``."""
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < len(batches):
        batch = batches[len(samples) % len(batches)]
        started = time.perf_counter()
        encoder.encode_with_stats(batch, top_k)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=str(ROOT / "config" / "local.yaml"))
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--batches", default="1,4,8,16")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--queries", type=Path, default=SCIFACT)
    parser.add_argument("--out", type=Path, default=RESULTS / "splade_pooling")
    args = parser.parse_args(argv)

    import torch

    from serve_app.encoders.splade import SpladeEncoder

    torch.set_num_threads(1)
    config = load_config(args.config, environ={}).splade.model_copy(update={"device": "cpu"})
    if args.tiny:
        from benchmarks.tiny_models import build_tiny_models

        _, splade_dir = build_tiny_models(Path(tempfile.mkdtemp(prefix="splade-pooling-")))
        config = config.model_copy(update={"model": str(splade_dir)})
    encoder = SpladeEncoder(config)
    claims = load_queries(args.queries)
    rows = []
    try:
        for size in (int(b) for b in args.batches.split(",")):
            batches = [claims[i : i + size] for i in range(0, len(claims) - size + 1, size)][:32]
            lengths = [[len(ids) for ids in encoder.tokenizer(b)["input_ids"]] for b in batches]
            real = sum(sum(x) for x in lengths)
            positions = sum(max(x) * len(x) for x in lengths)
            row = {"batch": size, "padding_share": round(1 - real / positions, 3)}
            for way, pack in (("packed_ms", True), ("zeroed_padding_ms", False)):
                encoder._pack_tokens = pack
                timed(encoder, batches[:2], config.query_top_k, 0)  # warm-up
                row[way] = round(timed(encoder, batches, config.query_top_k, args.seconds), 3)
            encoder._pack_tokens = True
            row["ratio"] = round(row["packed_ms"] / row["zeroed_padding_ms"], 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        encoder.close()
    report = {"model": "tiny random" if args.tiny else config.model, "rows": rows}
    lines = [
        f"# SPLADE query batches on one CPU thread ({report['model']}, SciFact claims)",
        "",
        "| batch | padding share | packed ms | zeroed padding ms | packed / zeroed |",
        "|---|---|---|---|---|",
        *(
            f"| {r['batch']} | {r['padding_share']:.0%} | {r['packed_ms']} | "
            f"{r['zeroed_padding_ms']} | {r['ratio']} |"
            for r in rows
        ),
    ]
    write_report(args.out, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
