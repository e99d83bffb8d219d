"""Every benchmark script runs for a few seconds on a tiny corpus, so none of them can rot.

These check that the scripts run and write well-formed reports, not any figure.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_vllm

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def tiny_config(tmp_path: Path) -> Path:
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_ingest_benchmark(tmp_path):
    out = tmp_path / "ingest"
    run(
        "ingest.py",
        "--corpus",
        "scifact",
        "--max-docs",
        "24",
        "--batch-size",
        "8",
        "--out",
        str(out),
    )
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["ingest"]["chunks"] > 0 and report["encoders"]["ceiling_chunks_per_s"] > 0
    assert report["reingest"]["chunk_count_before"] == report["reingest"]["chunk_count_after"]
    assert out.with_suffix(".md").is_file()


def test_quality_benchmark(tmp_path):
    out = tmp_path / "quality"
    run(
        "quality.py",
        "--config",
        str(tiny_config(tmp_path)),
        "--max-docs",
        "60",
        "--max-queries",
        "8",
        "--depth",
        "50",
        "--out",
        str(out),
    )
    report = json.loads(out.with_suffix(".json").read_text())
    assert {"bm25", "splade", "dense"} <= set(report["results"])
    assert out.with_suffix(".png").stat().st_size > 0


def test_scale_benchmark(tmp_path):
    out = tmp_path / "scale"
    run("scale.py", "--sizes", "300", "1000", "--queries", "5", "--batch", "500", "--out", str(out))
    report = json.loads(out.with_suffix(".json").read_text())
    assert set(report["sizes"]) == {"300", "1000"}
    assert report["sizes"]["1000"]["dense"]["p50_ms"] > 0
    assert out.with_suffix(".png").stat().st_size > 0


def test_serve_startup_benchmark(tmp_path):
    result = run(
        "serve_startup.py", "--docs", "10", "--queries", "5", "--out", str(tmp_path), timeout=900
    )
    assert "ready after" in result.stdout and "replica dense" in result.stdout


def test_chunking_benchmark(tmp_path, plos_dir):
    folder = tmp_path / "docs"
    folder.mkdir()
    for path in sorted(plos_dir.glob("*.xml"))[:2]:
        (folder / path.name).write_bytes(path.read_bytes())
    out = tmp_path / "chunking"
    run("chunking.py", "--folder", str(folder), "--out", str(out))
    report = json.loads(out.with_suffix(".json").read_text())
    assert set(report["chunkers"]) == {"sliding_window", "sections", "imrad"}
    assert all(r["same_ids_on_rechunk"] and r["chunks"] > 0 for r in report["chunkers"].values())


@pytest.mark.vllm
def test_vllm_embed_benchmark(tmp_path):
    """Both backends and both batchings on a tiny random Qwen3 (the figures need the 0.6B shape)."""
    require_vllm()
    out = tmp_path / "vllm_embed"
    run(
        "vllm_embed.py",
        *("--shape", "tiny", "--model-dir", str(tmp_path / "model"), "--out", str(out)),
        *("--passages", "6", "--padding-passages", "20", "--max-length", "64"),
        *("--batch-size", "4", "--batch-tokens", "128"),
    )
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["passages"] == 6 and report["vllm"]["passages_per_s"] > 0
    assert report["vllm_vs_transformers_min_cosine_bf16"] > 0.99
    assert report["padding"]["token_budget"] <= report["padding"]["fixed_count"]
    assert set(report["batching"]) == {"token_budget", "fixed_count", "speedup"}
    assert "| vllm |" in out.with_suffix(".md").read_text()
