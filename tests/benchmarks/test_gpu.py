"""The GPU suite (`python -m benchmarks gpu`) runs against this code, every step, with its own
configuration moved to this CPU.

GPU time is scarce, so a step that fails on a renamed flag, a retired config key or an API
change must fail here first. What changes for the CPU is only what the machine dictates:
`cuda`/float16 become `cpu`/float32, the GPU shares become 0, the CPU shares and the models'
batch budgets fit two cores, and every load lasts seconds over SciFact's first documents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.benchmarks.test_smoke import FAST_METRICS

ROOT = Path(__file__).resolve().parents[2]
DOCS = 20


def cpu_config(path: Path) -> Path:
    config = yaml.safe_load((ROOT / "benchmarks" / "gpu.yaml").read_text())
    for model in ("dense", "splade"):
        assert config[model]["device"] == "cuda", f"the suite runs {model} on the GPU"
        # The start-up warm-up runs the shapes of a model's batch budget: a CPU's, not the GPU's.
        config[model].update(device="cpu", dtype="float32", batch_size=8, max_batch_tokens=512)
    for settings in config["serve"].values():
        if isinstance(settings, dict) and "num_cpus" in settings:
            settings.update(num_cpus=0.1, num_gpus=0)
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
@pytest.mark.timeout(1500)  # two Serve starts (ingest; cold and search), each loading the models
def test_every_step_of_the_gpu_suite_runs_on_this_code(tmp_path, scifact_dir):
    out = tmp_path / "out"
    sizes = {"--docs": DOCS, "--model-cpus": 0.1, "--chunker-cpus": "0.1", "--clients": 4,
             "--cold-n": 2, "--cold-s": 2, "--warm-s": 2, "--sweep-start": 10, "--sweep-step": 20,
             "--sweep-max": 50, "--step-s": 2, "--rate-s": 2, "--conc-s": 2,
             "--store-s": 0.5}  # fmt: skip
    command = [sys.executable, "-m", "benchmarks", "gpu", "encoders", "ingest", "cold", "search"]
    command += ["store", "--config", str(cpu_config(tmp_path / "gpu-on-cpu.yaml"))]
    command += ["--corpus", str(scifact_dir), "--work", str(tmp_path / "work"), "--out", str(out)]
    command += [str(a) for pair in sizes.items() for a in pair]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SERVE_APP_"))}
    done = subprocess.run(
        command, cwd=ROOT, env={**env, "HF_HUB_OFFLINE": "1", **FAST_METRICS},
        capture_output=True, text=True,
        timeout=1400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == ["encoders", "ingest", "cold", "search", "store"]

    # encoders: the same model on the same device agrees with itself
    encoders = summary["encoders"]
    assert encoders["dense_cosine_to_cpu_min"] > 0.9999 and encoders["docs_per_s"]["dense"] > 0
    assert encoders["splade_relative_dot_error_max"] < 1e-4

    # ingest: once per chunker share (one share here: each is a Serve start of its own), the
    # encoders' ceiling on the first
    http = summary["ingest_chunker_0.1"]["http"]
    assert http["documents"] == DOCS and http["failed_requests"] == 0
    assert json.loads((out / "ingest-chunker-0.1.json").read_text())["http"] == http
    assert summary["ingest_chunker_0.1"]["http_over_slower_encoder"] > 0

    # cold: the windows from the first request after a start, over the ingest's index
    cold = summary["cold"]
    assert cold["ready_s"] > 0 and len(cold["windows"]) == 2
    assert all(w["requests"] > 0 and w["errors"] == {} for w in cold["windows"])

    # search: the sweep, 80 % of its maximum with the model calls, the closed loop
    search = summary["search"]
    assert search["max_sustainable_qps"] >= 10
    assert search["warm"]["errors"] == {} and search["rate80"]["errors"] == {}
    calls = search["model_calls_rate80"]
    assert set(calls) == {"dense", "splade"}
    assert all(c["calls"] > 0 and c["queries_per_call"] >= 1 for c in calls.values()), calls
    closed = search["closed_loop"]
    assert closed["closed_loop"]["achieved_qps"] > 0 and closed["profile"]
    assert "replica store" in closed["closed_loop"]["cpu_ms_per_query_by_process"]
    assert (out / "sweep.png").is_file()

    # store: the same index searched in one process, Serve stopped (the store-retrieve tool,
    # benchmarks/dev/store_retrieve.py, run whole: its own smoke test)
    store = json.loads((out / "store-retrieve.json").read_text())
    assert store["chunks"] > 0 and [w["batch"] for w in store["windows"]] == [1, 4, 16]
    assert all(w["queries"] > 0 and w["cpu_ms_per_query"] > 0 for w in store["windows"])
    assert store["profile"]
