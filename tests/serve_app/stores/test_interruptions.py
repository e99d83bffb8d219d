"""Writes and deletes interrupted at every awaited store call, on every topology (real
engines): a cancellation (a request timeout, a client gone) lands after the n-th call for
n = 1, 2, ... until the operation completes untouched. After each: the old version or the new
one is served whole, never a mix; a retry converges with no duplicates."""

from __future__ import annotations

import asyncio

import pytest
from store_helpers import TOPOLOGY_NAMES, make_store

from serve_app.schemas import ScopeKey, SearchFilters
from serve_app.stores.index import StoreIndex
from serve_app.testing.store_contract import MODELS, encoded, query, write

pytestmark = pytest.mark.asyncio(loop_scope="session")

PRIMITIVES = ("chunk_ids", "upsert", "delete_ids", "delete_documents", "document_states")


class Interrupter:
    """Counts the store calls of an index's backends; at the n-th, cancels ``target``."""

    def __init__(self, index: StoreIndex) -> None:
        self.calls: list[str] = []
        self.cancel_at: int | None = None
        self.target: asyncio.Task | None = None
        for backend in index.backends:
            for name in PRIMITIVES:
                setattr(backend, name, self._wrap(backend, name, getattr(backend, name)))

    def _wrap(self, backend, name, call):
        async def counted(*args, **kwargs):
            self.calls.append(f"{backend.name}.{name}")
            if len(self.calls) == self.cancel_at and self.target is not None:
                self.target.cancel()
            return await call(*args, **kwargs)

        return counted

    async def run(self, n: int, work) -> str:
        self.calls.clear()
        self.cancel_at = n
        self.target = asyncio.ensure_future(work)
        try:
            await self.target
            return "completed"
        except asyncio.CancelledError:
            return "cancelled"
        finally:
            self.cancel_at = self.target = None


def version(tenant: ScopeKey, tag: str, n: int):
    chunks = [
        encoded("d", i, f"{tag} chunk {i}", [1, 0.1 * i, 0, 0], {1: 1.0, 2 + i: 0.5}, tenant, version=tag)
        for i in range(n)
    ]  # fmt: skip
    return write("d", chunks, content_hash=tag), sorted(c.chunk.text for c in chunks)


async def served(index: StoreIndex, tenant: ScopeKey) -> list[str]:
    """Texts of document d that any strategy returns and the final fetch serves."""
    found = await index.search_many(
        list(index.strategies), query(terms={1: 1.0}, text="chunk"), 100, tenant,
        SearchFilters(doc_ids=["d"]),
    )  # fmt: skip
    ids = list(dict.fromkeys(h.chunk_id for hits in found.values() for h in hits))
    return sorted(c.text for c in await index.fetch(tenant, ids))


@pytest.fixture(params=TOPOLOGY_NAMES)
async def index(request, tmp_path, opensearch_url):
    store = make_store(request.param, tmp_path, opensearch_url)
    await store.open(MODELS)
    yield store
    await store.close()


async def test_a_replace_cancelled_at_every_store_call_serves_one_version(index):
    interrupter = Interrupter(index)
    outcomes = []
    seen: set[str] = set()
    for n in range(1, 40):
        tenant = ScopeKey(f"t{n}")
        old, old_texts = version(tenant, "v1", 3)
        new, new_texts = version(tenant, "v2", 4)
        await index.write_documents(tenant, [old])
        outcome = await interrupter.run(n, index.write_documents(tenant, [new]))
        outcomes.append(
            (n, interrupter.calls[n - 1] if len(interrupter.calls) >= n else "", outcome)
        )
        after = await served(index, tenant)
        assert after in (old_texts, new_texts), f"call {n} ({interrupter.calls}): {after}"
        seen.add("old" if after == old_texts else "new")
        hashes = await index.document_hashes(tenant, ["d"])
        assert hashes in ({"d": "v1"}, {"d": "v2"}) or (hashes == {} and after == old_texts)

        await index.write_documents(tenant, [new])  # the retry converges
        assert await served(index, tenant) == new_texts
        assert await index.count(tenant) == 4
        assert await index.document_hashes(tenant, ["d"]) == {"d": "v2"}
        if outcome == "completed":
            break
    else:
        pytest.fail("the write never completed")
    assert seen == {"old", "new"}  # rolled back before the commit, forward after it
    cancelled = [o for o in outcomes if o[2] == "cancelled"]
    # Every kind of call of the write was hit at least once, on every store.
    assert {call for _, call, _ in cancelled} == {
        f"{b.name}.{p}" for b in index.backends for p in ("chunk_ids", "upsert", "delete_ids")
    }


async def test_a_new_document_cancelled_at_every_store_call_is_whole_or_absent(index):
    interrupter = Interrupter(index)
    for n in range(1, 40):
        tenant = ScopeKey(f"n{n}")
        new, new_texts = version(tenant, "v1", 3)
        outcome = await interrupter.run(n, index.write_documents(tenant, [new]))
        assert await served(index, tenant) in ([], new_texts)
        await index.write_documents(tenant, [new])
        assert await served(index, tenant) == new_texts and await index.count(tenant) == 3
        if outcome == "completed":
            break


async def test_a_delete_cancelled_at_every_store_call_is_done_or_not_begun(index):
    interrupter = Interrupter(index)
    for n in range(1, 20):
        tenant = ScopeKey(f"x{n}")
        doc, texts = version(tenant, "v1", 3)
        await index.write_documents(tenant, [doc])
        outcome = await interrupter.run(n, index.delete_document(tenant, "d"))
        await asyncio.sleep(0)  # a delete, once started, finishes by itself
        for _ in range(50):
            if not index._recoveries:
                break
            await asyncio.sleep(0.05)
        assert await served(index, tenant) in ([], texts)
        await index.delete_document(tenant, "d")
        assert await served(index, tenant) == [] and await index.count(tenant) == 0
        if outcome == "completed":
            break
