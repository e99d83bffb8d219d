"""A model replica's tokenizer splits a batch over the CPUs Ray reserved for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# In a fresh process, as a replica starts: serve-app's default (no parallelism), then the
# deployment's call, then one batch through the dense encoder's own tokenizer. The Rust pool's
# worker threads are what a parallel batch leaves behind.
PROBE = """
import json, os, sys
import psutil
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from deployments.replicas.tokenizer_threads import tokenize_on_reserved_cpus
from serve_app.config import load_config
from serve_app.encoders.dense_inputs import DenseInputs
from transformers import AutoTokenizer
from serve_app.config import resolve_model_path
config = load_config("config/local.yaml").dense
inputs = DenseInputs(config, AutoTokenizer.from_pretrained(resolve_model_path(config.model)))
threads = tokenize_on_reserved_cpus(float(sys.argv[1]))
before = psutil.Process().num_threads()
ids = inputs.token_ids(["a sentence about proteins and folding " * 20] * 256)
print(json.dumps({"threads": threads, "new_threads": psutil.Process().num_threads() - before,
                  "rows": len(ids)}))
"""


def probe(num_cpus: float) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("RAYON_NUM_THREADS", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(num_cpus)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("num_cpus", "pool"), [(1.0, 0), (0.5, 0), (3.0, 3)])
def test_the_tokenizer_pool_is_the_replicas_cpus(num_cpus, pool):
    report = probe(num_cpus)
    assert report["rows"] == 256 and report["threads"] == max(1, int(num_cpus))
    # One CPU: the batch runs on the calling thread (no pool). Three: a pool of three threads.
    assert report["new_threads"] == pool
