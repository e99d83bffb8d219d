"""What Markdown nested deep (block quotes, list items) costs an upload, against plain text.

    python -m benchmarks.dev.nested_markup [--config config/local.yaml] [--kb 100]
        [--inputs plain.txt,quotes.md,...]

In process, no Serve: each input (plain prose, nested block quotes, nested list items, all
``--kb`` KB) goes through the loader, the configured chunker and both document encoders of
the configuration (dense and SPLADE, as an upload encodes its chunks: contextual header and
text), each stage timed once. Prints one Markdown table: bytes, chunks, tokens encoded,
seconds per stage and seconds per MB. The inputs are the ones
``tests/serve_app/chunking/test_nesting_cost.py`` pins at 20 KB.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from tests.serve_app.chunking.test_nesting_cost import NESTED, plain


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=Path("config/local.yaml"))
    parser.add_argument("--kb", type=int, default=100)
    parser.add_argument("--inputs", help="comma-separated names of the inputs (default: all)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from serve_app.config import load_config
    from serve_app.encoders.dense_transformers import TransformersDenseEncoder
    from serve_app.encoders.splade import SpladeEncoder
    from serve_app.loaders import load_bytes
    from serve_app.pipelines.components import build_chunker
    from serve_app.pipelines.ingest import encoding_text

    config = load_config(args.config, environ={})
    chunker = build_chunker(config)
    dense = TransformersDenseEncoder(config.dense)
    splade = SpladeEncoder(config.splade)
    size = args.kb * 1000
    makers = {"plain.txt": plain, **NESTED}
    names = args.inputs.split(",") if args.inputs else list(makers)
    inputs = {name: makers[name](size) for name in names}
    print(
        f"chunker {config.chunker.name}, {config.chunker.max_tokens} tokens; "
        f"{args.kb} KB each\n\n| input | bytes | chunks | tokens | load s | chunk s | dense s "
        "| splade s | total s | s per MB |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    for name, data in inputs.items():
        started = time.perf_counter()
        document = load_bytes(data, name)
        loaded = time.perf_counter()
        chunks = chunker.chunk(document)
        chunked = time.perf_counter()
        texts = [encoding_text(c, config.chunker.contextual_header) for c in chunks]
        dense.encode(texts)
        densed = time.perf_counter()
        splade.encode(texts, config.splade.doc_top_k)
        done = time.perf_counter()
        tokens = sum(chunker.counter.count(texts))
        total = done - started
        print(
            f"| {name} | {len(data)} | {len(chunks)} | {tokens} | {loaded - started:.2f} "
            f"| {chunked - loaded:.2f} | {densed - chunked:.2f} | {done - densed:.2f} "
            f"| {total:.2f} | {total / len(data) * 1e6:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
