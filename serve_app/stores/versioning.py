"""Versioned collections behind an alias, with the model guard: one algorithm for Qdrant and
OpenSearch, over a few primitives each implements.

The name in the configuration is an alias in front of ``{alias}-v{n}``. Each version records
what built its vectors (the models, and for OpenSearch the mapping version). Opening with
the same binding uses the version behind the alias; with another one it is refused
(``ModelMismatchError``) unless ``stores.migrate`` is set, which creates ``-v{n+1}`` and
moves the alias in one atomic request (the old version stays for rollback).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from serve_app.errors import ModelMismatchError
from serve_app.stores.base import IndexModels, next_version_name

log = logging.getLogger(__name__)


class VersionedStore(Protocol):
    alias: str
    kind: str  # "Qdrant collection", "OpenSearch index": for messages

    async def alias_target(self) -> str | None: ...

    async def version_names(self) -> list[str]: ...

    async def create_version(self, name: str, models: IndexModels) -> None: ...

    async def stored_binding(self, name: str) -> Any:
        """What the version records about what built it."""
        ...

    def binding(self, models: IndexModels) -> Any:
        """What a version built now with ``models`` would record."""
        ...

    async def point_alias(self, name: str, previous: str | None) -> None:
        """Move the alias to ``name`` (from ``previous``) in one atomic request."""
        ...


async def open_versioned(store: VersionedStore, models: IndexModels, migrate: bool) -> str:
    """The physical name behind the alias after applying the model guard (see module doc)."""
    target = await store.alias_target()
    if target is None:
        return await _new_version(store, models, None)
    stored, wanted = await store.stored_binding(target), store.binding(models)
    if stored == wanted:
        return target
    if not migrate:
        raise ModelMismatchError(
            f"{store.kind} {target} (alias {store.alias}) was built with other models or "
            f"settings ({stored} vs {wanted}); set stores.migrate: true to create a new "
            "version behind the alias and re-ingest"
        )
    log.warning("%s %s: models changed, new version behind the alias", store.kind, store.alias)
    return await _new_version(store, models, target)


async def _new_version(store: VersionedStore, models: IndexModels, previous: str | None) -> str:
    name = next_version_name(store.alias, await store.version_names())
    await store.create_version(name, models)
    await store.point_alias(name, previous)
    return name
