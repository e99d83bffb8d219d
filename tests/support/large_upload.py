"""Uploads of a document over 4 MB through a real local Ray Serve (its own Ray instance).

Run as ``python -m tests.support.large_upload --chars N --limits configured,4194304``; prints
one JSON line, a report per limit. The local run's configuration (config/local.yaml: Serve's
throughput mode, so gRPC between replicas, and its message limit) with tiny random encoders
and no SPLADE, so the models cost seconds, not minutes, for thousands of chunks. The document
is SciFact abstracts joined up to ``N`` characters: the chunker call carries it whole, and the
chunks come back whole, each far over gRPC's default 4 MB. For each limit the application is
deployed anew with ``RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH`` in its replicas' environment
(``configured``: none, so ``serve.env``'s applies), then the document is uploaded.
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
from tests.support.data import SCIFACT_DIR, SMOLLM2
from tests.support.serve_apps import deploy, with_replica_env

ROOT = Path(__file__).resolve().parents[2]
SCIFACT = SCIFACT_DIR
UPLOAD_TIMEOUT_S = 300.0
GRPC_LIMIT_ENV = "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH"


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


def run(chars: int, limits: list[int | None]) -> list[dict]:
    """One upload for each gRPC message limit in ``limits`` (None: the configured one), each
    on the application deployed with that limit in its replicas' environment, one after the
    other on one Ray instance."""
    from deployments.builder.serve_config import render_serve_config
    from deployments.local.launcher import start_serve, stop
    from deployments.settings import service_config

    workdir = Path(tempfile.mkdtemp(prefix="large-upload-"))
    data = bench_config_data(ROOT / "config" / "local.yaml", False, workdir)
    data["splade"]["enabled"] = False
    data["search"]["strategies"] = ["bm25", "dense"]
    data["llm"] = {**data["llm"], **SMOLLM2}  # the tests' LLM: not the subject
    config = service_config(config_from_dict(data, "large upload scenario"))
    url = f"http://{config.serve.host}:{config.serve.port}"
    document = render_serve_config(config, http_host=config.serve.host)
    text = document_text(chars)
    start_serve(config, num_cpus=2)
    try:
        reports = []
        for number, limit in enumerate(limits):
            env = {} if limit is None else {GRPC_LIMIT_ENV: str(limit)}
            deploy(with_replica_env(document, env), url)
            reports.append({"limit": limit, **upload(url, f"large-{number}", text)})
        return reports
    finally:
        stop()


def upload(url: str, doc_id: str, text: str) -> dict:
    started = time.monotonic()
    response = httpx.post(
        f"{url}/v1/documents",
        json={"documents": [{"id": doc_id, "title": "Large", "text": text}]},
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
        read = httpx.get(f"{url}/v1/documents/{doc_id}", timeout=30)
        report["read_status"] = read.status_code
        report["read_chunks"] = len(read.json()["chunk_ids"]) if read.status_code == 200 else None
    else:
        report["error"] = response.json().get("error")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chars", type=int, default=4_500_000)
    parser.add_argument(
        "--limits",
        default="configured",
        help="comma-separated gRPC message limits in bytes ('configured': serve.env's), in order",
    )
    args = parser.parse_args(argv)
    limits = [None if v == "configured" else int(v) for v in args.limits.split(",")]
    print(json.dumps(run(args.chars, limits)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
