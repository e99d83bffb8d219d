"""The garbage-collector settings a replica applies once started (serve_app.collector).

Each case runs in a fresh interpreter: freezing and thresholds are process-wide."""

from __future__ import annotations

import json
import re
import subprocess
import sys

PROBE = """
import gc, json, logging, sys, weakref
from serve_app.collector import settle_collector
from serve_app.config import CollectorSettings

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)

kept = [Node() for _ in range(1000)]            # what start-up built and keeps
dropped = cycle()                                # start-up's garbage, a cycle
default_threshold = gc.get_threshold()
settle_collector(CollectorSettings(**json.loads(sys.argv[1])))
later = cycle()                                  # garbage made while serving
gc.collect()
print(json.dumps({
    "frozen": gc.get_freeze_count(),
    "threshold": gc.get_threshold(),
    "default_threshold": default_threshold,
    "startup_garbage_freed": dropped() is None,
    "later_cycle_freed": later() is None,
    "kept_frozen": gc.get_freeze_count() >= len(kept),
}))
"""


def settle(**settings) -> tuple[dict, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(settings)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(done.stdout), done.stderr


def test_start_up_objects_are_frozen_and_its_garbage_is_not():
    state, log = settle(freeze_after_start=True, gen0_threshold=50_000)
    assert state["kept_frozen"] and state["frozen"] > 1000
    assert state["startup_garbage_freed"]  # collected before the freeze, not kept for life
    assert state["later_cycle_freed"]  # cycles made afterwards are still collected
    assert state["threshold"][0] == 50_000
    assert state["threshold"][1:] == state["default_threshold"][1:]
    logged = re.search(r"collector: (\d+) objects frozen, young-generation threshold (\d+)", log)
    assert logged and int(logged[1]) > 1000 and int(logged[2]) == 50_000


def test_zero_and_false_leave_pythons_collector_as_it_was():
    state, log = settle(freeze_after_start=False, gen0_threshold=0)
    assert state["frozen"] == 0
    assert state["threshold"] == state["default_threshold"]
    assert "collector: 0 objects frozen, young-generation threshold 700" in log
