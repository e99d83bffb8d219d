"""Model and chunker replicas tokenize on the CPUs Ray reserved for them.

The fast tokenizers split a batch over a Rust thread pool (no GIL) only when
``TOKENIZERS_PARALLELISM`` allows it, which ``serve-app`` turns off for its processes (the
library warns, and falls back to one thread, in a process forked after the pool was used).
These replicas fork nothing, and tokenize whole batches (a model's document lane, a
chunker's ``chunk_many``): on one thread that bounds them, not the GPU (SciFact chunks over
HTTP on an H200: each encoder replica at one core, the GPU 0-22 % busy). The library reads
the variable at each call and sizes its pool from ``RAYON_NUM_THREADS`` once, at its first
parallel call, so this runs before the model loads.
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
