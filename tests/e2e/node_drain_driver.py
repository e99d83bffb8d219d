"""The driver of tests/e2e/test_node_sigterm_drain.py, run in a process of its own (the test
process may already be connected to another Ray cluster): deploy a one-replica Serve app on a
multi-node cluster, start a long request (an upload's stand-in) on the replica, send SIGTERM
to the ``ray start --block`` process of the replica's node (what the kubelet does to a Ray
pod), keep sending short requests, and print what happened as one JSON line.

    python -m tests.e2e.node_drain_driver ADDRESS '{"127.0.0.2": PID, ...}' SLOW_S
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

import psutil
import ray
from ray import serve


@serve.deployment(
    ray_actor_options={"num_cpus": 0, "resources": {"slot": 1}},
    graceful_shutdown_timeout_s=60,
    graceful_shutdown_wait_loop_s=0.5,
)
class Upload:
    async def __call__(self, seconds: float) -> str:
        await asyncio.sleep(seconds)
        return ray.util.get_node_ip_address()


def alive(pid: int) -> bool:
    """Still running (a zombie has exited: its parent, the test, reaps it later)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def main() -> None:
    address, pids, slow_s = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3])
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    deadline = time.monotonic() + 120
    while sum(n["Alive"] for n in ray.nodes()) < 1 + len(pids):
        assert time.monotonic() < deadline, "the worker nodes never joined"
        time.sleep(0.5)
    serve.start(http_options={"location": "NoServer"})
    handle = serve.run(Upload.bind(), name="drain", route_prefix=None)
    node = handle.remote(0).result()
    slow = handle.remote(slow_s)
    time.sleep(1)
    pid = pids[node]
    os.kill(pid, signal.SIGTERM)
    terminated = time.monotonic()
    quick: list[dict] = []
    exited_s = None
    while time.monotonic() - terminated < slow_s + 4:  # past the long request's end
        sent = time.monotonic() - terminated
        try:
            landed = handle.remote(0).result(timeout_s=30)
            quick.append({"sent_s": round(sent, 2), "node": landed})
        except Exception as error:  # recorded: the test decides
            quick.append({"sent_s": round(sent, 2), "error": type(error).__name__})
        if exited_s is None and not alive(pid):
            exited_s = round(time.monotonic() - terminated, 2)
        time.sleep(0.5)
    try:
        outcome = {"node": slow.result(timeout_s=60)}
    except Exception as error:
        outcome = {"error": type(error).__name__}
    outcome["done_s"] = round(time.monotonic() - terminated, 2)
    while exited_s is None and time.monotonic() - terminated < 120:
        if not alive(pid):
            exited_s = round(time.monotonic() - terminated, 2)
        time.sleep(0.2)
    print(json.dumps({"node": node, "slow": outcome, "quick": quick, "exited_s": exited_s}))


if __name__ == "__main__":
    main()
