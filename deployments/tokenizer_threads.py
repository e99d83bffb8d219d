"""A model replica tokenizes on the CPUs Ray reserved for it.

The fast tokenizers split a batch over a Rust thread pool (no GIL) only when
``TOKENIZERS_PARALLELISM`` allows it, which ``serve-app`` turns off for its processes (the
library warns, and falls back to one thread, in a process forked after the pool was used).
A model replica forks nothing, and its document lane tokenizes whole batches: on one
thread that bounds it, not the GPU (SciFact chunks over HTTP on an H200: each encoder
replica at one core, the GPU 0-22 % busy). The library reads the variable at each call and sizes its pool from
``RAYON_NUM_THREADS`` once, at its first parallel call, so this runs before the model loads.
"""

from __future__ import annotations

import os


def tokenize_on_reserved_cpus(num_cpus: float) -> int:
    """Let this process's tokenizers use ``num_cpus`` threads (whole CPUs, at least one);
    returns the thread count. One CPU keeps tokenization on the calling thread."""
    threads = max(1, int(num_cpus))
    if threads > 1:
        os.environ["RAYON_NUM_THREADS"] = str(threads)
        os.environ["TOKENIZERS_PARALLELISM"] = "true"
    return threads
