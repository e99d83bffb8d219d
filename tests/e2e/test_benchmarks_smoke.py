"""The HTTP benchmarks (load, overhead) for a few seconds against the e2e Serve app."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    return result


def queries_file(tmp_path: Path) -> Path:
    path = tmp_path / "queries.txt"
    path.write_text("vitamin D deficiency\ntumour suppressor genes\nstem cell therapy\n")
    return path


def test_load_open_closed_sweep_and_check(serve_url, tmp_path):
    queries = str(queries_file(tmp_path))
    common = ["--url", serve_url, "--api-key", "key-a", "--queries", queries, "--warmup", "0.5"]
    out = tmp_path / "open.json"
    result = run(
        "load.py",
        *common,
        "--rate",
        "3",
        "--duration",
        "2",
        "--json",
        str(out),
        "--check-p95-ms",
        "60000",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert {"p50_ms", "p95_ms", "p99_ms", "achieved_qps", "errors"} <= set(report) and report[
        "ok"
    ] > 0

    closed = tmp_path / "closed.json"
    assert (
        run(
            "load.py", *common, "--concurrency", "2", "--duration", "2", "--json", str(closed)
        ).returncode
        == 0
    )
    assert json.loads(closed.read_text())["mode"] == "closed-loop"

    sweep = tmp_path / "sweep.json"
    result = run(
        "load.py",
        *common,
        "--sweep",
        "--sweep-start",
        "2",
        "--sweep-step",
        "2",
        "--sweep-max",
        "4",
        "--duration",
        "1.5",
        "--cooldown",
        "0.5",
        "--json",
        str(sweep),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(sweep.read_text())
    assert "max_sustainable_qps" in report and len(report["points"]) >= 1
    assert sweep.with_suffix(".png").is_file()

    failing = run(
        "load.py",
        *common,
        "--rate",
        "2",
        "--duration",
        "1",
        "--check-p95-ms",
        "0.001",
        "--json",
        str(tmp_path / "fail.json"),
    )
    assert failing.returncode == 1 and "FAIL" in failing.stderr


def test_load_refuses_other_hosts(tmp_path):
    result = run("load.py", "--url", "http://10.0.0.1:8000", "--rate", "1", "--duration", "1")
    assert result.returncode == 2 and "127.0.0.1" in result.stderr


def test_overhead(serve_url, serve_config, tmp_path):
    out = tmp_path / "overhead.json"
    result = run(
        "overhead.py",
        "--url",
        serve_url,
        "--api-key",
        "key-a",
        "--tenant",
        "tenant-a",
        "--index-dir",
        str(serve_config.data_path / "qdrant"),
        "--concurrency",
        "2",
        "--duration",
        "2",
        "--warmup",
        "0.5",
        "--queries",
        str(queries_file(tmp_path)),
        "--json",
        str(out),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["in_process"]["achieved_qps"] > 0 and report["serve_http"]["achieved_qps"] > 0
