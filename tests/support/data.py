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
