"""One process owns an embedded index (``stores.ownership``): a second process is refused
before it reads a file of the index, with the holder named; the index opens again once the
holder is gone, however it went. And a store whose engine refuses writes (its files changed
under it by a process that ignored the lock) answers STORE_UNAVAILABLE and is not ready."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import qdrant_edge as edge
from store_helpers import MODELS, encoded, write

from serve_app.config import EmbeddedStoreConfig
from serve_app.errors import IndexInUseError, StoreUnavailableError
from serve_app.schemas import ScopeKey
from serve_app.stores.embedded import embedded_index
from serve_app.stores.ownership import OWNER_URL_ENV

HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from serve_app.config import EmbeddedStoreConfig
    from serve_app.stores.values import IndexModels
    from serve_app.stores.embedded import embedded_index

    async def main():
        index = embedded_index(sys.argv[1], EmbeddedStoreConfig(exact=True))
        await index.open(IndexModels("m", 4, "s", "b"))
        print("held", flush=True)
        sys.stdin.readline()
        if sys.argv[2] == "close":
            await index.close()

    asyncio.run(main())
    """
)


def holder(path, how: str = "close") -> subprocess.Popen:
    env = {OWNER_URL_ENV: "http://127.0.0.1:8123"}
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**__import__("os").environ, **env},
    )
    assert process.stdout.readline().strip() == "held"
    return process


@pytest.mark.parametrize("how", ["close", "killed"])
async def test_a_second_process_is_refused_until_the_holder_goes(tmp_path, how):
    path = tmp_path / "idx"
    first = holder(path)
    try:
        before = sorted(p.name for p in path.rglob("*"))
        other = embedded_index(path, EmbeddedStoreConfig(exact=True))
        with pytest.raises(IndexInUseError) as refused:
            await other.open(MODELS)
        message = refused.value.message
        assert f"pid {first.pid}" in message and "http://127.0.0.1:8123" in message
        assert "--url" in message
        with pytest.raises(IndexInUseError):
            await other.attach()
        assert sorted(p.name for p in path.rglob("*")) == before  # nothing touched
    finally:
        if how == "killed":
            first.kill()
        else:
            first.communicate("\n", timeout=60)
        first.wait(60)
    await other.open(MODELS)
    await other.write_documents(
        ScopeKey("t1"), [write("d1", [encoded("d1", 0, "alpha", [1, 0, 0, 0], {1: 1.0})])]
    )
    assert await other.count(ScopeKey("t1")) == 1
    await other.close()


async def test_a_store_whose_engine_refuses_writes_is_unavailable_and_not_ready(tmp_path):
    path = tmp_path / "idx"
    index = embedded_index(path, EmbeddedStoreConfig(exact=True))
    await index.open(MODELS)
    try:
        await index.write_documents(
            ScopeKey("t1"), [write("d1", [encoded("d1", 0, "a", [1, 0, 0, 0], {1: 1.0})])]
        )
        assert await index.healthy()
        # What a process that ignores the lock does: its failed open breaks the owner's files.
        with pytest.raises(Exception, match="WouldBlock"):
            edge.EdgeShard.load(str(path / "shard"))
        with pytest.raises(StoreUnavailableError) as refused:
            await index.write_documents(
                ScopeKey("t1"), [write("d2", [encoded("d2", 0, "b", [0, 1, 0, 0], {2: 1.0})])]
            )
        assert refused.value.status == 503 and refused.value.code == "STORE_UNAVAILABLE"
        assert not await index.healthy()
    finally:
        await index.close()
