"""Access lines never stall the event loop: in a process whose stderr is a pipe nobody reads
(a log collector that stopped), the loop keeps its pace while 5,000 lines are logged, and
every line arrives once the pipe is read again. With the logging module's own stream handler
(main's) the loop stopped at the first write the pipe could not take."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CHILD = r"""
import asyncio, json, logging, sys, time
from serve_app.api.observability import JsonFormatter, configure_json_logging
if sys.argv[1] == "plain":
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("serve_app"); root.handlers[:] = [handler]
    root.setLevel("INFO"); root.propagate = False
else:
    configure_json_logging()
access = logging.getLogger("serve_app.access")

async def main():
    lags = []
    async def ticker():
        while True:
            t = time.perf_counter(); await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - t - 0.01)
    tick = asyncio.create_task(ticker())
    for i in range(5000):
        access.info("request", extra={"path": f"/v1/search/{i}", "status": 200})
        if i % 50 == 0:
            await asyncio.sleep(0)
    await asyncio.sleep(0.2)
    tick.cancel()
    print(json.dumps({"max_lag_s": max(lags)}), flush=True)

asyncio.run(main())
"""


@pytest.mark.parametrize("handler", ["ours", "plain"])
def test_a_stopped_log_reader_does_not_stall_the_loop(handler):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, "plain" if handler == "plain" else "ours"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 5
        os.set_blocking(child.stdout.fileno(), False)
        report = b""
        while b"\n" not in report and time.monotonic() < deadline:  # stderr left unread
            report += child.stdout.read() or b""
            time.sleep(0.05)
        stalled = b"\n" not in report
        if handler == "plain":
            assert stalled, report  # the loop stopped at the full pipe
            return
        assert not stalled, "the loop stopped while the log reader was away"
        assert json.loads(report)["max_lag_s"] < 0.5, report
        lines = child.stderr.read().decode().splitlines()  # the reader comes back
        child.wait(30)
    finally:
        child.kill()
        child.wait(10)
    paths = [json.loads(line)["path"] for line in lines if '"path"' in line]
    assert len(paths) == 5_000 and paths[:2] == ["/v1/search/0", "/v1/search/1"]
