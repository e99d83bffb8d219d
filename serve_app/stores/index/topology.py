"""The backends of one store topology and their lifecycle; every part of ``StoreIndex``
builds on it."""

from __future__ import annotations

import asyncio
from typing import Any

from serve_app.errors import ConfigError
from serve_app.schemas import Strategy
from serve_app.stores.protocols import Backend, ChunkBackend
from serve_app.stores.values import IndexModels

RECOVERY_TIMEOUT_S = 30.0


class Topology:
    """The backends of a topology; the first one that holds chunks serves fetches and holds
    the collection registry."""

    def __init__(
        self, backends: list[Backend], recovery_timeout_s: float = RECOVERY_TIMEOUT_S
    ) -> None:
        holders = [b for b in backends if getattr(b, "holds_chunks", False)]
        if not holders:
            raise ConfigError("a store topology needs one store that holds the chunks")
        self.backends = backends
        self.chunk_store: ChunkBackend = holders[0]  # type: ignore[assignment]
        self.strategies: tuple[Strategy, ...] = tuple(
            dict.fromkeys(s for b in backends for s in b.strategies)
        )
        self._route = {s: next(b for b in backends if s in b.strategies) for s in self.strategies}
        self.recovery_timeout_s = recovery_timeout_s
        self._recoveries: set[asyncio.Task[Any]] = set()

    async def open(self, models: IndexModels) -> None:
        # Every store's open settles before this returns or raises: a plain gather would raise
        # the first refusal while another store's open went on creating its version behind
        # the caller's back (seen: the split topology's Qdrant alias still unset after the
        # opener had been refused by OpenSearch).
        opened = await asyncio.gather(
            *(b.open(models) for b in self.backends), return_exceptions=True
        )
        for outcome in opened:
            if isinstance(outcome, BaseException):
                raise outcome
        await self.chunk_store.open_registry()

    async def attach(self) -> None:
        """Open every store as it is, with no model guard (``inspect``, ``validate``)."""
        await asyncio.gather(*(b.attach() for b in self.backends))

    async def close(self) -> None:
        if self._recoveries:  # let interrupted writes finish their cleanup first
            await asyncio.wait(self._recoveries, timeout=self.recovery_timeout_s)
        await asyncio.gather(*(b.close() for b in self.backends))

    async def healthy(self) -> bool:
        return all(await asyncio.gather(*(b.healthy() for b in self.backends)))
