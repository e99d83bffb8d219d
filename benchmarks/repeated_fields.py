"""What a long title costs: every chunk repeats its document's title, headings, source, metadata.

    python benchmarks/repeated_fields.py [--text-kb 1600] [--title-kb 100]
        [--out benchmarks/results/repeated_fields]

Ingests one document of ``--text-kb`` KB of text in process (tiny random encoders, BM25 and
dense, sliding-window chunks, the embedded store), each case in its own Python process so that
its peak RSS is its own:

1. a 100-character title;
2. a ``--title-kb`` KB title with ``limits.max_repeated_chars`` lifted (the code before the limit);
3. the same title under the configuration's limit (refused before anything is written).

Reports each case's outcome, seconds, peak RSS and the size of the data directory it left.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.reports import write_report  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
UNLIMITED = 10**9


def document_text(kb: int) -> str:
    words = []
    size = 0
    i = 0
    while size < kb * 1000:
        word = f"word{i % 5000} protein cell gene"
        words.append(word)
        size += len(word) + 1
        i += 1
    return " ".join(words)[: kb * 1000]


async def ingest_once(config_path: Path, text_kb: int, title_chars: int, limit: int | None) -> dict:
    from benchmarks.serving_path import bench_config_data
    from serve_app.config import config_from_dict
    from serve_app.errors import ServeAppError
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.ingest import IngestPipeline
    from serve_app.schemas import Document

    workdir = Path(tempfile.mkdtemp(prefix="repeated-fields-"))
    data = bench_config_data(config_path, False, workdir)
    data["splade"]["enabled"] = False
    data["search"]["strategies"] = ["bm25", "dense"]
    if limit is not None:
        data["limits"]["max_repeated_chars"] = limit
    config = config_from_dict(data, "repeated_fields benchmark")
    components = await build_components(config)
    document = Document(id="long-title", title="t" * title_chars, text=document_text(text_kb))
    started = time.perf_counter()
    try:
        result = await IngestPipeline(components).ingest([document])
        outcome = {"status": 200, "chunks_written": result.chunks_written}
    except ServeAppError as error:
        outcome = {"status": error.status, "code": error.code, "message": str(error)[:200]}
    finally:
        seconds = time.perf_counter() - started
        await components.close()
    # Blocks, not st_size: the store preallocates sparse files.
    data_bytes = sum(f.stat().st_blocks * 512 for f in (workdir / "data").rglob("*") if f.is_file())
    return {
        "title_chars": title_chars,
        "text_chars": len(document.text),
        "max_repeated_chars": config.limits.max_repeated_chars,
        **outcome,
        "seconds": round(seconds, 2),
        # Linux reports ru_maxrss in KiB.
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "data_dir_mb": round(data_bytes / 1e6, 1),
    }


def run_case(args: argparse.Namespace, title_chars: int, limit: int | None) -> dict:
    command = [
        sys.executable,
        __file__,
        "--case",
        json.dumps({"title_chars": title_chars, "limit": limit}),
        "--config",
        str(args.config),
        "--text-kb",
        str(args.text_kb),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"case {title_chars} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=ROOT / "config" / "local.yaml")
    parser.add_argument("--text-kb", type=int, default=1600)
    parser.add_argument("--title-kb", type=int, default=100)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS / "repeated_fields")
    args = parser.parse_args(argv)
    if args.case:
        case = json.loads(args.case)
        row = asyncio.run(
            ingest_once(args.config, args.text_kb, case["title_chars"], case["limit"])
        )
        print(json.dumps(row), flush=True)
        return 0

    cases = [
        ("short title", 100, None),
        ("long title, no limit", args.title_kb * 1000, UNLIMITED),
        ("long title, configured limit", args.title_kb * 1000, None),
    ]
    rows = []
    for name, title_chars, limit in cases:
        row = {"case": name, **run_case(args, title_chars, limit)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    report = {"text_kb": args.text_kb, "title_kb": args.title_kb, "rows": rows}
    lines = [
        f"# One {args.text_kb} KB document, in process (tiny encoders, BM25 + dense)",
        "",
        "| case | title chars | max_repeated_chars | outcome | seconds | peak RSS MB | data MB |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {r['case']} | {r['title_chars']:,} | {r['max_repeated_chars']:,} | "
            f"{r['status']} {r.get('chunks_written', r.get('code', ''))} | {r['seconds']} | "
            f"{r['peak_rss_mb']} | {r['data_dir_mb']} |"
            for r in rows
        ),
    ]
    write_report(args.out, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
