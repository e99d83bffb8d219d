"""A long-lived process's garbage collector, set once the process has started
(``serve.collector``; each Ray Serve replica applies it at the end of its start-up).

A replica keeps what start-up built (Ray's and torch's modules, the models, the open index)
for its whole life, and Python's full collections walk all of it again on the thread that
serves requests, stalling every request the replica holds. Frozen, those objects are left out
of every later collection; a higher young-generation threshold collects the hot path's
short-lived containers less often (most are freed by reference counting before any
collection sees them). Cycles are still collected.
"""

from __future__ import annotations

import gc
import logging

from serve_app.config import CollectorSettings

log = logging.getLogger("serve_app.collector")


def settle_collector(settings: CollectorSettings) -> None:
    """Call when start-up's objects exist (the end of a replica's ``__init__``)."""
    if settings.gen0_threshold:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(settings.gen0_threshold, gen1, gen2)
    if settings.freeze_after_start:
        gc.collect()  # start-up's garbage is freed, not frozen for the process's life
        gc.freeze()
    log.info(
        "collector: %d objects frozen, young-generation threshold %d",
        gc.get_freeze_count(),
        gc.get_threshold()[0],
    )
