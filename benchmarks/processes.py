"""Ray's processes on this machine by kind, for memory and CPU accounting in benchmarks."""

from __future__ import annotations

import os
import statistics
import time

import psutil


def process_kind(cmdline: str, pid: int) -> str | None:
    """A readable kind for one of Ray's processes (replicas by deployment), else None."""
    if pid == os.getpid():
        return "driver (this script)"
    if "ServeReplica:" in cmdline:  # ray::ServeReplica:<app>:<deployment>
        return "replica " + cmdline.split("ServeReplica:", 1)[1].split()[0].split(":")[-1]
    if cmdline.startswith("ray::"):  # ray::<Actor>.<method being run>: keep the actor
        return cmdline.split()[0].split(".")[0]
    if "ray" in cmdline:
        return "ray system (gcs, raylet, monitors, dashboard)"
    return None


def ray_processes(root: psutil.Process | None = None) -> dict[int, str]:
    """pid -> kind of every Ray process under ``root`` (default: every process here)."""
    found = {}
    candidates = root.children(recursive=True) if root else psutil.process_iter()
    for process in candidates:
        try:
            cmdline = " ".join(process.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        kind = process_kind(cmdline, process.pid)
        if kind is not None:
            found[process.pid] = kind
    return found


def cpu_seconds(pids: dict[int, str]) -> dict[int, float]:
    """User + system CPU seconds so far of each pid still alive."""
    out = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        out[pid] = times.user + times.system
    return out


def cpu_by_kind(pids: dict[int, str], before: dict[int, float], after: dict[int, float]) -> dict:
    """CPU seconds spent between two ``cpu_seconds`` readings, summed per process kind."""
    totals: dict[str, float] = {}
    for pid, end in after.items():
        kind = pids[pid]
        totals[kind] = totals.get(kind, 0.0) + end - before.get(pid, 0.0)
    return totals


def host_probe_ms(seconds: float = 1.0) -> float:
    """Median milliseconds of a fixed pure-Python workload, ``sum(range(10**6))``, on one core,
    repeated for about ``seconds``.

    The shared cores of the benchmark host run the same code up to twice as fast in one hour
    as in another, and vary from one minute to the next; timed just before and just after a
    measurement (while nothing else of the benchmark runs) it says how fast the host was
    around it, lower being faster. A bracket, not a correction: the load itself is not probed."""
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < 3:
        started = time.perf_counter()
        sum(range(1_000_000))
        samples.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(samples), 2)
