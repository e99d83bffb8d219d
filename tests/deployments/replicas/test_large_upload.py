"""A document over 4 MB through a real local Ray Serve whose replicas talk gRPC (Serve's
throughput mode, config/local.yaml). gRPC caps a message at 4 MB unless told otherwise; the
chunker call carries the document whole. With the configured limit the upload is written and
readable; with gRPC's default it fails with a stable 503 naming the call, not a 500
(tests/support/large_upload.py: both cases in one subprocess, on one Ray instance)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.large_upload import UPLOAD_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[3]
CHARS = 4_500_000
GRPC_DEFAULT = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def scenarios() -> dict[str, dict]:
    """Both limits on one Ray instance: the configured one, then gRPC's default."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.support.large_upload", "--chars", str(CHARS),
         "--limits", f"configured,{GRPC_DEFAULT}"],
        cwd=ROOT, capture_output=True, text=True, timeout=2 * UPLOAD_TIMEOUT_S + 240,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    configured, default = json.loads(result.stdout.strip().splitlines()[-1])
    for report in (configured, default):
        assert report["body_bytes"] > GRPC_DEFAULT, report
    return {"configured": configured, "default": default}


@pytest.mark.slow
def test_a_document_over_four_megabytes_is_written_and_readable(scenarios):
    report = scenarios["configured"]
    assert report["status"] == 200, report
    assert report["chunks_written"] > 1000 and report["read_chunks"] == report["chunks_written"]


@pytest.mark.slow
def test_with_grpcs_default_limit_it_fails_as_a_503_naming_the_call(scenarios):
    report = scenarios["default"]
    assert report["status"] == 503, report
    assert report["error"]["code"] == "SERVICE_UNAVAILABLE"
    assert report["error"]["message"] == (
        "chunker deployment call failed: gRPC RESOURCE_EXHAUSTED; nothing of this request was written"
    )
