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
    out = tmp_path / "chunking_threads"
    run("chunking.py", "--folder", str(folder), "--out", str(out), "--chunkers", "sliding_window",
        "--tokenizer-threads", "2", "--batch", "1")  # fmt: skip
    report = json.loads(out.with_suffix(".json").read_text())
    assert set(report["chunkers"]) == {"sliding_window"} and report["tokenizer_threads"] == 2
    assert report["chunkers"]["sliding_window"]["same_ids_on_rechunk"]


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


def test_serving_path_benchmark(tmp_path):
    """Tiny encoders, in process and through Serve, closed loop, sweep and py-spy profiles."""
    out = tmp_path / "serving_path"
    run(
        "serving_path.py",
        *("--docs", "30", "--clients", "4", "--duration", "2", "--warmup", "0.5"),
        *("--sweep", "--sweep-duration", "1", "--profile-s", "1", "--out", str(out)),
        timeout=900,
    )
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["models"] == "tiny random" and report["index"]["chunks"] > 0
    for path in ("in_process", "serve"):
        closed = report[path]["closed_loop"]
        assert closed["achieved_qps"] > 0 and not closed["errors"]
        assert closed["cpu_ms_per_query"] > 0
        assert len(report[path]["host_probe_ms"]) == 2 and min(report[path]["host_probe_ms"]) > 0
        assert "max_sustainable_qps" in report[path]["sweep"]
    assert any(
        k.startswith("replica")
        for k in report["serve"]["closed_loop"]["cpu_ms_per_query_by_process"]
    )
    assert report["serve"]["profile"], "py-spy sampled no replica"
    # Read back from Ray's metrics agent: every search calls both encoders, and concurrent
    # searches (4 clients) never make more calls than queries.
    calls = report["serve"]["model_calls"]
    assert set(calls) == {"dense", "splade"}
    for model in calls.values():
        assert model["calls"] > 0 and model["queries_per_call"] >= 1
        assert sum(model["calls_by_size"].values()) == model["calls"]


def test_search_during_ingest_benchmark(tmp_path, plos_dir):
    folder = tmp_path / "docs"
    folder.mkdir()
    for path in sorted(plos_dir.glob("*.xml"))[:2]:
        (folder / path.name).write_bytes(path.read_bytes())
    out = tmp_path / "sdi"
    run(
        "search_during_ingest.py",
        *("--folder", str(folder), "--duration", "4", "--slice", "2", "--rate", "2"),
        *("--config", str(tiny_config(tmp_path)), "--out", str(out)),
        timeout=900,
    )
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["searches"]["requests"] > 0 and report["ingest"]["files_total"] in (0, 2)
    assert report["stop_after_sigint_s"] < 30


def test_ingest_http_benchmark(tmp_path):
    out = tmp_path / "ingest_http"
    run(
        "ingest_http.py",
        *("--docs", "12", "--docs-per-request", "4", "--clients", "2"),
        *("--config", str(tiny_config(tmp_path)), "--out", str(out)),
        timeout=900,
    )
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["http"]["documents"] == 12 and report["http"]["failed_requests"] == 0
    assert report["ceiling"]["slower_chunks_per_s"] > 0 and report["http_over_slower_encoder"] > 0
    # The yardstick is each encoder's own batched call when both have one (transformers here).
    ceiling = report["ceiling"]
    assert ceiling["yardstick"] == "batched" and set(ceiling["batched_chunks_per_s"]) == {
        "dense",
        "splade",
    }


def test_query_encoding_benchmark(tmp_path):
    out = tmp_path / "query_encoding"
    run(
        "query_encoding.py",
        "--count",
        "5",
        "--config",
        str(tiny_config(tmp_path)),
        "--out",
        str(out),
    )
    report = json.loads(out.with_suffix(".json").read_text())
    assert {"dense", "splade", "bm25", "all_vs_sum_of_direct"} == set(
        report["pipeline_over_direct"]
    )


def test_splade_pooling_benchmark(tmp_path):
    out = tmp_path / "splade_pooling"
    run("splade_pooling.py", "--tiny", "--batches", "1,4", "--seconds", "0.2", "--out", str(out))
    report = json.loads(out.with_suffix(".json").read_text())
    assert [row["batch"] for row in report["rows"]] == [1, 4]
    assert report["rows"][0]["padding_share"] == 0  # one claim alone has no padding
    assert all(row["packed_ms"] > 0 and row["zeroed_padding_ms"] > 0 for row in report["rows"])


def test_repeated_fields_benchmark(tmp_path):
    out = tmp_path / "repeated_fields"
    run("repeated_fields.py", "--text-kb", "20", "--title-kb", "20", "--out", str(out))
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert [row["status"] for row in rows] == [200, 200, 413]
    assert (
        rows[2]["code"] == "PAYLOAD_TOO_LARGE" and rows[2]["data_dir_mb"] < rows[1]["data_dir_mb"]
    )


def test_store_hits_benchmark(tmp_path):
    out = tmp_path / "store_hits"
    run("store_hits.py", "--chunks", "200", "--batch", "2", "--repeat", "5", "--out", str(out))
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["hits_per_batch"] == 2 * 2 * 100  # both strategies fill their lists
    assert len(report["timings"]) == 5
    assert all(row["batch_ms"] > 0 for row in report["timings"].values())


def test_store_retrieve_benchmark(tmp_path):
    out = tmp_path / "store_retrieve"
    args = ("--index-docs", "20", "--max-queries", "6", "--batch", "1,3", "--duration", "0.5")
    config = str(tiny_config(tmp_path))
    run(
        "store_retrieve.py",
        "--config",
        config,
        *args,
        "--warmup",
        "0.2",
        "--profile",
        "--out",
        str(out),
    )
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["chunks"] > 0 and report["queries"] == 6
    assert [w["batch"] for w in report["windows"]] == [1, 3]
    assert all(w["queries"] > 0 and w["cpu_ms_per_query"] > 0 for w in report["windows"])
    assert report["profile"] and out.with_suffix(".md").is_file()


def test_store_optimize_benchmark(tmp_path):
    out = tmp_path / "store_optimize"
    run("store_optimize.py", "--chunks", "300", "--batch", "2", "--repeat", "3", "--out", str(out))
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["chunks"] == 300 and report["index"] == "synthetic"
    for shard in ("as_written", "as_opened"):
        assert report[shard]["points"] == 300 and report[shard]["batch_ms"] > 0
    assert report["attach_s"] > 0 and report["longest_stall_ms"] > 0


def test_store_gil_benchmark(tmp_path):
    out = tmp_path / "store_gil"
    run("store_gil.py", "--chunks", "300", "--fetch", "50", "--seconds", "0.2", "--out", str(out))
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["points"] == 300 and report["fetch_points"] == 50
    assert {"query_batch", "retrieve"} <= set(report["calls"])
    assert all(row["calls"] > 0 and row["call_ms"] > 0 for row in report["calls"].values())
