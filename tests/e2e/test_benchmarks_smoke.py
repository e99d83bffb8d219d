"""The load suite for a few seconds against the e2e Serve app."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "benchmarks", "load", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)


def queries_file(tmp_path: Path) -> Path:
    path = tmp_path / "queries.txt"
    path.write_text("vitamin D deficiency\ntumour suppressor genes\nstem cell therapy\n")
    return path


def test_load_open_closed_sweep_and_check(serve_url, tmp_path):
    common = ["--url", serve_url, "--api-key", "key-a", "--queries", str(queries_file(tmp_path))]
    common += ["--warmup", "0.5"]
    out = tmp_path / "open"
    result = run(*common, "--rate", "3", "--duration", "2", "--out", str(out),
                 "--check-p95-ms", "60000")  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(out.with_suffix(".json").read_text())
    assert {"p50_ms", "p95_ms", "p99_ms", "achieved_qps", "errors"} <= set(report)
    assert report["ok"] > 0 and report["mode"] == "open-loop"

    closed = tmp_path / "closed"
    result = run(*common, "--concurrency", "2", "--duration", "2", "--out", str(closed))
    assert result.returncode == 0, result.stderr
    assert json.loads(closed.with_suffix(".json").read_text())["mode"] == "closed-loop"

    sweep = tmp_path / "sweep"
    result = run(*common, "--sweep", "--sweep-start", "2", "--sweep-step", "2", "--sweep-max", "4",
                 "--duration", "1.5", "--cooldown", "0.5", "--out", str(sweep))  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(sweep.with_suffix(".json").read_text())
    assert "max_sustainable_qps" in report and len(report["points"]) >= 1
    assert sweep.with_suffix(".png").is_file() and sweep.with_suffix(".md").is_file()

    failing = run(*common, "--rate", "2", "--duration", "1", "--check-p95-ms", "0.001",
                  "--out", str(tmp_path / "fail"))  # fmt: skip
    assert failing.returncode == 1 and "FAIL" in failing.stderr


def test_load_refuses_other_hosts(tmp_path):
    result = run("--url", "http://10.0.0.1:8000", "--rate", "1", "--duration", "1")
    assert result.returncode == 2 and "127.0.0.1" in result.stderr
