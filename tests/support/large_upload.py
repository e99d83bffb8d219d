"""One upload of a document over 4 MB through a real local Ray Serve (its own Ray instance).

Run as ``python -m tests.support.large_upload --chars N``; prints one JSON line. The local
run's configuration (config/local.yaml: Serve's throughput mode, so gRPC between replicas, and
its message limit) with tiny random encoders and no SPLADE, so the models cost seconds, not
minutes, for thousands of chunks. The document is SciFact abstracts joined up to ``N``
characters: the chunker call carries it whole, and the chunks come back whole, each far over
gRPC's default 4 MB. Set ``RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH`` in the environment to
run with another limit (the environment wins over ``serve.env``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.service import bench_config_data
from serve_app.config import config_from_dict
from serve_app.evaluation.beir import load_beir
from tests.support.data import SCIFACT_DIR
from tests.support.local_run import wait_ready

ROOT = Path(__file__).resolve().parents[2]
SCIFACT = SCIFACT_DIR
UPLOAD_TIMEOUT_S = 300.0


def document_text(chars: int) -> str:
    abstracts = [d.text for d in load_beir(SCIFACT, "test").corpus if d.text]
    parts: list[str] = []
    size = 0
    while size < chars:
        for text in abstracts:
            parts.append(text)
            size += len(text) + 2
            if size >= chars:
                break
    return "\n\n".join(parts)[:chars]


def run(chars: int) -> dict:
    from deployments.local.launcher import start, stop

    workdir = Path(tempfile.mkdtemp(prefix="large-upload-"))
    data = bench_config_data(ROOT / "config" / "local.yaml", False, workdir)
    data["splade"]["enabled"] = False
    data["search"]["strategies"] = ["bm25", "dense"]
    config = config_from_dict(data, "large upload scenario")
    text = document_text(chars)
    url = start(config, num_cpus=2)
    try:
        wait_ready(url)
        started = time.monotonic()
        response = httpx.post(
            f"{url}/v1/documents",
            json={"documents": [{"id": "large", "title": "Large", "text": text}]},
            timeout=UPLOAD_TIMEOUT_S,
        )
        report: dict = {
            "chars": len(text),
            "body_bytes": len(text.encode()),
            "status": response.status_code,
            "seconds": round(time.monotonic() - started, 1),
        }
        if response.status_code == 200:
            report["chunks_written"] = response.json()["chunks_written"]
            read = httpx.get(f"{url}/v1/documents/large", timeout=30)
            report["read_status"] = read.status_code
            report["read_chunks"] = (
                len(read.json()["chunk_ids"]) if read.status_code == 200 else None
            )
        else:
            report["error"] = response.json().get("error")
        return report
    finally:
        stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chars", type=int, default=4_500_000)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.chars)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
