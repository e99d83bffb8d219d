"""A local run (``serve-app serve``) as a subprocess, for tests: its output lines collected in a
thread, a wait for a line, and a stop that leaves no process behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from tests.support.data import SMOLLM2

ROOT = Path(__file__).resolve().parents[2]


class Output:
    """Collects the process's output lines in a thread; ``wait_for`` a line with a text."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, args=(process,), daemon=True).start()

    def _read(self, process: subprocess.Popen) -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            with self._cond:
                self.lines.append(line.rstrip())
                self._cond.notify_all()

    def wait_for(self, text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                assert left > 0, f"no {text!r} in {timeout_s:g} s:\n" + "\n".join(self.lines[-40:])
                self._cond.wait(left)


def write_config(tmp: Path, **overrides: object) -> Path:
    """config/local.yaml with its own data_dir under ``tmp`` (and top-level overrides)."""
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp / "data")
    config["llm"] = {**config.get("llm", {}), **SMOLLM2}  # the tests' small LLM
    config.update(overrides)
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class LocalRun:
    """``serve-app --config CONFIG serve --port PORT [--ingest ...]`` in a subprocess."""

    def __init__(self, config: Path, port: int, ingest: list[Path] | None = None) -> None:
        self.config = config
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        command = [
            sys.executable, "-m", "deployments.cli", "--config", str(config),
            "serve", "--port", str(port),
        ]  # fmt: skip
        if ingest:
            command += ["--ingest", *map(str, ingest)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
        for key in [k for k in env if k.startswith(("RAY_", "SERVE_APP_"))]:
            del env[key]  # each run makes its own (deployments/local/instance.py)
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.output = Output(self.process)

    def cli(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
        """A ``serve-app`` command with this run's configuration, beside the run."""
        command = [sys.executable, "-m", "deployments.cli", "--config", str(self.config), *args]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        return subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
        )

    def stop(self, timeout_s: float = 60) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def wait_ready(url: str, timeout_s: float = 180, process: subprocess.Popen | None = None) -> None:
    """Until ``url``'s /readyz answers 200; ``process`` (a ``subprocess.Popen`` serving it,
    if any) exiting first ends the wait at once."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise SystemExit(f"the Serve process exited ({process.returncode}) before ready")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        time.sleep(0.5)
    raise SystemExit(f"the Serve app at {url} was not ready within {timeout_s:g} s")
