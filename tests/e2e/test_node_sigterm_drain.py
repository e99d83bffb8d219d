"""SIGTERM to a Ray pod on a real multi-node Ray cluster (a head and two worker nodes started
with ``ray start --block`` on this machine, each worker at an address of its own): with the
chart's ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` the node drains through the GCS first, so a
long request in flight on its replica (an upload) finishes, requests go to the replacement
replica on the other node as soon as it runs and never back, none fails, and the node exits
once idle; with Ray's drain off (0, how Ray before 2.60 and
the chart without the variable behave for an upload longer than Ray's 30 s default) the same
request is cut. The chart's value is the one rendered (tests/helm/test_drain.py holds it to
the pod's grace period)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from serve_app.ports import free_port
from tests.helm.test_chart import CHART, HELM, objects, rayservice

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
WORKERS = ("127.0.0.2", "127.0.0.3")
SLOW_S = 8.0


def chart_drain_s() -> str:
    spec = rayservice(objects(str(HELM), CHART, None))["spec"]
    (worker, *_) = spec["rayClusterConfig"]["workerGroupSpecs"]
    env = worker["template"]["spec"]["containers"][0]["env"]
    (value,) = [e["value"] for e in env if e["name"] == "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"]
    return value


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [RAY, "start", "--block", "--disable-usage-stats", *args],
        env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


def run_cluster(drain_s: str) -> dict:
    """Start the cluster, run the driver, stop every process of it: the driver's report."""
    temp = Path(tempfile.mkdtemp(prefix="rd", dir="/tmp"))  # Ray's socket paths stay short
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["RAY_AUTH_MODE"] = "disabled"
    port = free_port()
    nodes = [
        start(
            ["--head", "--port", str(port), "--num-cpus", "1", "--include-dashboard=false",
             "--node-ip-address", "127.0.0.1", "--temp-dir", str(temp),
             "--ray-client-server-port", str(free_port()),
             "--dashboard-agent-listen-port", str(free_port())],
            env, temp / "head.log",
        )
    ]  # fmt: skip
    pids = {}
    try:
        for i, ip in enumerate(WORKERS):
            worker = start(
                ["--address", f"127.0.0.1:{port}", "--num-cpus", "1",
                 "--resources", '{"slot": 1}', "--node-ip-address", ip,
                 "--temp-dir", str(temp / str(i)),
                 "--dashboard-agent-listen-port", str(free_port())],
                {**env, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": drain_s}, temp / f"w{i}.log",
            )  # fmt: skip
            nodes.append(worker)
            pids[ip] = worker.pid
        done = subprocess.run(
            [sys.executable, "-m", "tests.e2e.node_drain_driver", f"127.0.0.1:{port}",
             json.dumps(pids), str(SLOW_S)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=400,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        for node in nodes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)
            node.wait(timeout=30)


@pytest.mark.slow
def test_sigterm_to_a_ray_pod_lets_its_upload_finish_and_sends_new_requests_elsewhere():
    drain_s = chart_drain_s()
    assert float(drain_s) > SLOW_S
    started = time.monotonic()
    drained = run_cluster(drain_s)
    print(f"chart's drain ({drain_s} s): {json.dumps(drained)}")
    assert drained["slow"].get("node") == drained["node"], drained  # finished where it ran
    after = drained["quick"]
    assert after and all("node" in q for q in after), after  # none failed
    # Serve starts the replacement first and routes to the old replica until it runs (those
    # requests finish there too); from then on nothing lands on the draining node again.
    moved = next(i for i, q in enumerate(after) if q["node"] != drained["node"])
    assert after[moved]["sent_s"] <= 10, after
    assert all(q["node"] != drained["node"] for q in after[moved:]), after
    # The node went once idle: after the long request, long before the drain's deadline.
    assert drained["exited_s"] is not None
    assert SLOW_S - 1 - 0.5 <= drained["exited_s"] <= SLOW_S + 30, drained

    cut = run_cluster("0")
    print(f"Ray's drain off: {json.dumps(cut)} ({time.monotonic() - started:.0f} s in all)")
    assert "error" in cut["slow"], cut  # the defence gone: the upload is cut
