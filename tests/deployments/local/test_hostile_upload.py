"""A pathological Markdown upload against the running local service (`serve-app serve`, the
`make run` path on Ray Serve): answered within 2 s, searches meanwhile keep P95 < 500 ms, and
stopping the service leaves no process behind."""

from __future__ import annotations

import pytest

from tests.support.hostile_upload import run


@pytest.mark.slow
def test_pathological_upload_does_not_stall_the_local_service():
    report = run(heading_kb=100, uploads=2, rate=4, duration_s=15, docs=100)
    assert len(report["uploads"]) == 2
    for upload in report["uploads"]:
        assert upload["status"] == 200, upload
        assert upload["seconds"] < 2.0, upload
    searches = report["searches"]
    assert searches["requests"] >= 40 and not searches["errors"], searches
    assert searches["p95_ms"] < 500, searches
    assert report["stop"]["processes_in_tree"] > 0
    assert report["stop"]["left"] == [], report["stop"]["left"]
