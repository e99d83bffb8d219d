"""A pathological Markdown upload against the running local service (`serve-app serve`, the
`make run` path on Ray Serve): answered within 2 s, searches meanwhile keep P95 < 500 ms, and
stopping the service leaves no process behind. The figures come from the benchmark script."""

from __future__ import annotations

import json

import pytest

from benchmarks.hostile_upload import main


@pytest.mark.slow
def test_pathological_upload_does_not_stall_the_local_service(tmp_path):
    out = tmp_path / "hostile_upload"
    assert main(["--heading-kb", "100", "--uploads", "2", "--docs", "100", "--rate", "4",
                 "--duration", "15", "--out", str(out)]) == 0  # fmt: skip
    report = json.loads(out.with_suffix(".json").read_text())
    assert len(report["uploads"]) == 2
    for upload in report["uploads"]:
        assert upload["status"] == 200, upload
        assert upload["seconds"] < 2.0, upload
    searches = report["searches"]
    assert searches["requests"] >= 40 and not searches["errors"], searches
    assert searches["p95_ms"] < 500, searches
    assert report["processes_in_tree"] > 0
    assert report["left_after_stop"] == [], report["left_after_stop"]
