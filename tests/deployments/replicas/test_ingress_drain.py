"""An upload in flight when Serve replaces its ingress replica, on a real local Ray Serve behind
HAProxy (tests/support/ingress_drain.py: both cases in one subprocess, on one Ray instance).

Serve stops the old replica as soon as the update starts, while the new one is still starting.
The old replica drains for ``graceful_shutdown_timeout_s`` and is then killed: with the rule
config/gpu.yaml follows (Ray's direct-ingress draining window plus ``api.ingest_timeout_s``) the
upload completes; with a bound shorter than the upload (Serve's default is 20 s) it is cut. The
cluster side of the rule, read from the rendered chart with Ray's own constants, is
tests/helm/test_drain.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.ingress_drain import INGEST_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[3]
DOCS = 60


def local_draining_window_s() -> float:
    env = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())["serve"]["env"]
    return float(env["RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"])


@pytest.fixture(scope="module")
def scenarios() -> dict[str, dict]:
    """Both scenarios on one Ray instance: the rule's bound, then one shorter than the upload."""
    bounds = {"rule": local_draining_window_s() + INGEST_TIMEOUT_S, "short": 2.0}
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.ingress_drain",
         "--graceful-s", ",".join(str(b) for b in bounds.values()), "--docs", str(DOCS)],
        cwd=ROOT, capture_output=True, text=True, timeout=2 * INGEST_TIMEOUT_S + 240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    reports = dict(zip(bounds, json.loads(result.stdout.strip().splitlines()[-1]), strict=True))
    for report in reports.values():
        # Only meaningful when the old replica was draining while the upload was in flight.
        assert report["stopping_during_upload"], report
    return reports


@pytest.mark.slow
def test_an_upload_survives_its_ingress_replica_being_replaced(scenarios):
    report = scenarios["rule"]
    upload = report["upload"]
    assert upload["status"] == 200 and upload["documents"] == DOCS, report
    assert report["last_document_readable"] is True, report


@pytest.mark.slow
def test_a_drain_bound_shorter_than_the_upload_cuts_it(scenarios):
    report = scenarios["short"]
    assert report["upload"]["status"] != 200, report
