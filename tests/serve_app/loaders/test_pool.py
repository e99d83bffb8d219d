"""A loader worker, the process that parses hostile files, holds none of the replica's
secrets and a bounded address space: read from the real worker's ``/proc`` entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve_app.loaders.pool import LoaderPool

pytestmark = pytest.mark.asyncio(loop_scope="session")

SECRETS = {
    "RAY_AUTH_TOKEN": "ray-token-0c1d",
    "SERVE_APP_JWT_SECRET": "jwt-secret-7f2e",
    "SERVE_APP_OPENSEARCH_PASSWORD": "os-password-9a3b",
    "SERVE_APP_QDRANT_API_KEY": "qdrant-key-4e5f",
}


async def test_a_worker_holds_no_secret_and_a_bounded_address_space(monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    most = 768 * 1024**2
    pool = LoaderPool(workers=1, timeout_s=30, max_memory_bytes=most)
    try:
        document = await pool.load(b"# Notes\n\nPlasmids spread resistance.", "notes.md")
        (pid,) = pool.pids
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        limits = Path(f"/proc/{pid}/limits").read_text().splitlines()
    finally:
        await pool.close()
    assert "Plasmids" in str(document.model_dump())
    for name, value in SECRETS.items():
        assert name.encode() not in environ and value.encode() not in environ, name
    assert b"PATH=" in environ
    (address_space,) = [line for line in limits if line.startswith("Max address space")]
    assert address_space.split()[3:5] == [str(most), str(most)], address_space
    (core,) = [line for line in limits if line.startswith("Max core file size")]
    assert core.split()[4:6] == ["0", "0"], core
