"""Cores used by each kind of Ray process, beside a load (the GPU runs of ``gpu_run.sh``).

    python benchmarks/cpu_watch.py every STEP COUNT    # one line every STEP seconds, COUNT times
    python benchmarks/cpu_watch.py window DELAY SECONDS  # one line over a window, after DELAY
    python benchmarks/cpu_watch.py spytop FILE [N]      # the top frames of a py-spy raw file

On a GPU machine the question is which process is at its cores while the GPU waits; the
kinds are those of ``benchmarks.processes`` (replicas by deployment).
"""

from __future__ import annotations

import collections
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.processes import cpu_by_kind, cpu_seconds, ray_processes  # noqa: E402


def cores_over(seconds: float) -> dict[str, float]:
    pids = ray_processes()
    before, started = cpu_seconds(pids), time.perf_counter()
    time.sleep(seconds)
    spent = cpu_by_kind(pids, before, cpu_seconds(pids))
    elapsed = time.perf_counter() - started
    return {k: round(v / elapsed, 2) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}


def every(step: float, count: int) -> None:
    started = time.perf_counter()
    for _ in range(count):
        cores = cores_over(step)
        busy = ", ".join(
            f"{kind.replace('replica ', '')} {c:.2f}"
            for kind, c in list(cores.items())[:6]
            if c >= 0.05
        )
        print(f"[cpu {time.perf_counter() - started:5.1f}s] {busy}", flush=True)


def window(delay: float, seconds: float) -> None:
    time.sleep(delay)
    print("CPU cores used per kind:", json.dumps(cores_over(seconds)), flush=True)


def spytop(path: str, top: int = 12) -> None:
    """Own and inclusive shares of the frames in a py-spy ``--format raw`` file."""
    if not Path(path).is_file():
        print(f"{path}: no samples (py-spy did not run)")
        return
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in Path(path).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    print(f"{path}: {total} samples")
    for frame, n in own.most_common(top):
        print(f"  own {100 * n / total:5.1f}%  {frame[:150]}")
    for frame, n in inclusive.most_common(top):
        print(f"  incl {100 * n / total:5.1f}%  {frame[:150]}")


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "every":
        every(float(argv[1]), int(argv[2]))
    elif len(argv) >= 3 and argv[0] == "window":
        window(float(argv[1]), float(argv[2]))
    elif len(argv) >= 2 and argv[0] == "spytop":
        spytop(argv[1], int(argv[2]) if len(argv) > 2 else 12)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
