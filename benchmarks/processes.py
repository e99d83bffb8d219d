"""Ray's processes on this machine by kind: CPU and memory accounting, py-spy samples, and a
probe of how fast the host runs."""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil

DRIVER = "driver (this script)"


def process_kind(cmdline: str) -> str | None:
    """A readable kind for one of Ray's processes (replicas by deployment), else None."""
    if "ServeReplica:" in cmdline:  # ray::ServeReplica:<app>:<deployment>
        return "replica " + cmdline.split("ServeReplica:", 1)[1].split()[0].split(":")[-1]
    if cmdline.startswith("ray::"):  # ray::<Actor>.<method being run>: keep the actor
        return cmdline.split()[0].split(".")[0]
    return "ray system (gcs, raylet, monitors, dashboard)" if "ray" in cmdline else None


def own_processes() -> dict[int, str]:
    """pid -> kind of this process (the driver) and of every Ray process it started."""
    found = {os.getpid(): DRIVER}
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            if kind := process_kind(" ".join(process.cmdline())):
                found[process.pid] = kind
    return found


def cpu_seconds(pids: dict[int, str]) -> dict[int, float]:
    """User + system CPU seconds so far of each pid still alive."""
    out = {}
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = psutil.Process(pid).cpu_times()
            out[pid] = times.user + times.system
    return out


class CpuMeter:
    """CPU seconds of a fixed set of processes, by kind, from now to ``stop``."""

    def __init__(self, pids: dict[int, str]) -> None:
        self.pids = pids
        self.before = cpu_seconds(pids)
        self.started = time.perf_counter()

    def stop(self) -> tuple[dict[str, float], float]:
        """CPU seconds spent per kind, and the wall seconds they were spent in."""
        spent: Counter[str] = Counter()
        for pid, end in cpu_seconds(self.pids).items():
            spent[self.pids[pid]] += end - self.before.get(pid, 0.0)
        return dict(spent), time.perf_counter() - self.started

    def per_query(self, queries: int) -> dict:
        """CPU milliseconds a query, in all and by kind; the load generator's apart."""
        spent, _ = self.stop()
        scale = 1000 / max(queries, 1)
        generator = spent.pop(DRIVER, 0.0)
        return {
            "cpu_ms_per_query": round(sum(spent.values()) * scale, 2),
            "cpu_ms_per_query_by_process": {
                k: round(v * scale, 2) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
            },
            "load_generator_cpu_ms_per_query": round(generator * scale, 2),
        }

    def cores(self) -> dict[str, float]:
        """Cores busy per kind, busiest first."""
        spent, seconds = self.stop()
        return {k: round(v / seconds, 2) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}


def rss_mb_by_kind() -> dict[str, float]:
    """Resident memory of this process and the Ray processes it started, by kind."""
    totals: Counter[str] = Counter()
    for pid, kind in own_processes().items():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            totals[kind] += psutil.Process(pid).memory_info().rss / 2**20
    return {kind: round(mb, 1) for kind, mb in sorted(totals.items())}


def host_probe_ms(seconds: float = 1.0) -> float:
    """Median ms of ``sum(range(10**6))`` on one core over about ``seconds``. Shared cores run
    the same code up to twice as fast in one hour as in another: timed just before and after a
    measurement, it brackets how fast the host was (lower is faster); it corrects nothing."""
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(samples) < 3:
        started = time.perf_counter()
        sum(range(1_000_000))
        samples.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(samples), 2)


def py_spy_binary() -> Path | None:
    """py-spy beside the interpreter (a virtual environment) or on PATH (wheels installed with
    --target, as on the GPU machine's bundle); None when neither has it."""
    beside = Path(sys.executable).with_name("py-spy")
    found = beside if beside.exists() else shutil.which("py-spy")
    return Path(found) if found else None


def py_spy(spy: Path, pids: dict[int, str], seconds: float, folder: Path) -> list[subprocess.Popen]:
    """Start py-spy on each process (non-blocking sampling, raw folded stacks, one file each)."""
    jobs = []
    for pid, kind in pids.items():
        out = folder / f"{kind.replace(' ', '_').replace(':', '_')}-{pid}.txt"
        command = [str(spy), "record", "--pid", str(pid), "--duration", str(max(1, int(seconds)))]
        command += ["--rate", "100", "--format", "raw", "--nonblocking", "--output", str(out)]
        jobs.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return jobs


def top_functions(folder: Path, limit: int = 12) -> dict[str, list[dict]]:
    """Per sampled process: the functions with the most own samples (share of all samples)."""
    report: dict[str, list[dict]] = {}
    for path in sorted(folder.glob("*.txt")):
        own: Counter[str] = Counter()
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                name, _, where = stack.split(";")[-1].partition(" (")
                where = where.rstrip(")").rsplit(":", 1)[0].split("site-packages/")[-1]
                own[f"{name} ({where})"] += int(count)
        total = sum(own.values())
        if total:
            report[path.stem] = [
                {"function": f, "share": round(c / total, 3)} for f, c in own.most_common(limit)
            ]
    return report
