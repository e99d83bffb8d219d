"""Versioned collections behind an alias, with the model guard: one algorithm for Qdrant and
OpenSearch, over a few primitives each implements.

The name in the configuration is an alias in front of ``{alias}-v{n}``. Each version records
what built its vectors (the models, and for OpenSearch the mapping version). Opening with
the same binding uses the version behind the alias (one built before revisions were recorded
matches any revision, with a WARNING, and records it from then on); with another one it is refused
(``ModelMismatchError``) unless ``stores.migrate`` is set, which creates ``-v{n+1}`` and
moves the alias in one atomic request (the old version stays for rollback).

Several openers may run at once (every store replica opens the stores at start, all together
on a fresh install). They converge: an empty version with the same binding that the alias
does not point to yet (another opener's, or one left by an opener that died before moving
the alias) is adopted rather than followed by a second one; an opener whose creation finds
the name taken looks again; moving the alias leaves it on exactly one version, and an opener
that finds the alias elsewhere afterwards (a racing opener with other models) looks again,
so that it returns the version the alias points to or fails with the model guard's error.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Protocol

from serve_app.errors import ModelMismatchError, NotFoundError, ServiceUnavailableError
from serve_app.stores.binding import BindingVerdict, judge_binding
from serve_app.stores.values import IndexModels

log = logging.getLogger(__name__)


def versioned_names(alias: str, names: list[str]) -> list[str]:
    """The ``{alias}-v{n}`` names among ``names``, oldest first."""
    pattern = re.compile(rf"^{re.escape(alias)}-v(\d+)$")
    found = [(int(m.group(1)), n) for n in names if (m := pattern.match(n))]
    return [n for _, n in sorted(found)]


def next_version_name(alias: str, names: list[str]) -> str:
    existing = versioned_names(alias, names)
    version = int(existing[-1].rsplit("-v", 1)[1]) + 1 if existing else 1
    return f"{alias}-v{version}"


OPEN_ATTEMPTS = 5


class VersionTaken(Exception):
    """``create_version`` found the name taken: another opener created that version."""


class VersionedStore(Protocol):
    alias: str
    kind: str  # "Qdrant collection", "OpenSearch index": for messages

    async def alias_target(self) -> str | None: ...

    async def version_names(self) -> list[str]: ...

    async def create_version(self, name: str, models: IndexModels) -> None:
        """Create ``name``; raise ``VersionTaken`` if it exists already."""
        ...

    async def prepare_version(self, name: str) -> None:
        """Idempotent: what a version needs besides its creation (Qdrant's payload indexes),
        done by its creator and by an opener that adopts it (its creator may have died
        before doing it); on an empty version, so a repeat costs nothing."""
        ...

    async def version_is_empty(self, name: str) -> bool: ...

    async def stored_binding(self, name: str) -> Any:
        """What the version records about what built it."""
        ...

    def binding(self, models: IndexModels) -> Any:
        """What a version built now with ``models`` would record."""
        ...

    async def record_binding(self, name: str, models: IndexModels) -> None:
        """Record ``models`` as what built ``name`` (an index built before revisions were
        recorded gets them)."""
        ...

    async def point_alias(self, name: str, previous: str | None) -> None:
        """Move the alias to ``name`` (from ``previous``) in one atomic request, leaving it
        on ``name`` alone whatever it pointed to meanwhile."""
        ...


async def open_versioned(store: VersionedStore, models: IndexModels, migrate: bool) -> str:
    """The physical name behind the alias after applying the model guard (see module doc)."""
    for _ in range(OPEN_ATTEMPTS):
        target = await store.alias_target()
        if target is not None:
            verdict = judge_binding(await store.stored_binding(target), store.binding(models))
            if verdict.records_revisions:
                log.warning(
                    verdict.unrecorded_warning(f"{store.kind} {target} (alias {store.alias})")
                )
                await store.record_binding(target, models)
            if not verdict.refused:
                return target
            if not migrate:
                raise _mismatch(store, target, verdict)
            log.warning(
                "%s %s: models changed, new version behind the alias", store.kind, store.alias
            )
        try:
            return await _new_version(store, models, target, migrate)
        except VersionTaken:
            continue  # another opener created a version or moved the alias meanwhile: look again
    raise ServiceUnavailableError(
        f"{store.kind} {store.alias}: other openers kept creating versions or moving the alias "
        f"while this one opened it ({OPEN_ATTEMPTS} attempts)"
    )


async def attached_version(store: VersionedStore, setting: str) -> str:
    """The version the alias points to, for a replica that uses an index another opened
    (``setting``: the configuration key naming the alias, for the message)."""
    target = await store.alias_target()
    if target is None:
        raise NotFoundError(f"no {store.kind} behind the alias {store.alias!r} ({setting})")
    return target


def _mismatch(store: VersionedStore, name: str, verdict: BindingVerdict) -> ModelMismatchError:
    return ModelMismatchError(
        f"{store.kind} {name} (alias {store.alias}) was built with other models or settings "
        f"({verdict.describe()}); configure the models it was built with, or set "
        "stores.migrate: true to create a new version behind the alias and re-ingest"
    )


async def _new_version(
    store: VersionedStore, models: IndexModels, previous: str | None, migrate: bool
) -> str:
    names = versioned_names(store.alias, await store.version_names())
    wanted = store.binding(models)
    newest = names[-1] if names and names[-1] != previous else None
    stored = None if newest is None else await store.stored_binding(newest)
    if newest is not None and stored == wanted and await store.version_is_empty(newest):
        name = newest  # built for these models, nothing in it, not behind the alias: adopt it
    elif newest is not None and previous is None and not migrate:  # a first version, other models
        raise _mismatch(store, newest, judge_binding(stored, wanted))
    else:
        name = next_version_name(store.alias, names)
        await store.create_version(name, models)
    await store.prepare_version(name)
    await store.point_alias(name, previous)
    if await store.alias_target() != name:
        raise VersionTaken(name)  # a racing opener moved it since: look again
    return name
