"""Backup and restore of the embedded index (``serve-app backup`` / ``serve-app restore``).

A backup is one tar file: the index directory's files (the shard, ``index_meta.json``: the
models it was built with, ``collections.json``: the registry) and ``backup.json`` listing each
file's size and SHA-256. It is taken under the index's ownership lock (stores/ownership.py),
so never beside a process that has the index open: the engine writes its segments and
write-ahead log in place, and a copy taken beside a writer is not a consistent index. A
backup of an index a service holds is refused with the lock's message (stop the service, in
Kubernetes the RayService with its pods, then back up).

A restore unpacks into a stores.embedded.path that holds no index (or, with ``replace``, whose
index it replaces), also under the lock, and checks every file against ``backup.json`` (which
must list the metadata and the shard) before anything there is touched. Then the old entries
are renamed aside (into ``RESTORE_ASIDE``), the new ones moved in with the metadata last, and
the old ones deleted after: a move that fails puts the old index back; a restore killed midway
leaves the old index aside and no metadata, which the store refuses to open and the next
restore refuses to run over (both name the folder). The restored index opens with the models
recorded in it, so the model guard applies to it as to any other.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Any, cast

from serve_app.errors import ConflictError, IndexInUseError, InvalidInputError, NotFoundError
from serve_app.model_manifest import sha256_file
from serve_app.stores.embedded import META_FILE, REGISTRY_FILE, RESTORE_ASIDE, SHARD_DIR
from serve_app.stores.ownership import IndexOwnership

BACKUP_FILE = "backup.json"
BACKUP_VERSION = 1
_INDEX_ENTRIES = (META_FILE, REGISTRY_FILE, SHARD_DIR)


def _index_files(directory: Path) -> list[Path]:
    """The index's files under ``directory``, relative to it (not the lock file)."""
    files = []
    for entry in _INDEX_ENTRIES:
        path = directory / entry
        if path.is_file():
            files.append(Path(entry))
        elif path.is_dir():
            files += sorted(p.relative_to(directory) for p in path.rglob("*") if p.is_file())
    return files


def _owned(directory: Path, action: str) -> IndexOwnership:
    ownership = IndexOwnership(directory)
    try:
        ownership.acquire()
    except IndexInUseError as error:
        raise IndexInUseError(
            f"{error.message} A {action} needs the index closed: stop the service (in "
            "Kubernetes, delete the RayService and wait for its pods: docs/kubernetes.md, "
            '"Backing up the embedded store") and run it again.'
        ) from None
    return ownership


def backup(directory: Path, destination: Path) -> dict[str, Any]:
    """Write the index at ``directory`` to the tar file ``destination``; what it holds."""
    if not (directory / META_FILE).is_file():
        raise NotFoundError(f"no embedded index at {directory} (stores.embedded.path)")
    if destination.exists():
        raise ConflictError(f"{destination} exists: name a new file")
    ownership = _owned(directory, "backup")
    try:
        files = _index_files(directory)
        record = {
            "version": BACKUP_VERSION,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "source": str(directory),
            "models": json.loads((directory / META_FILE).read_text()),
            "files": {
                str(PurePosixPath(f)): {
                    "size": (directory / f).stat().st_size,
                    "sha256": sha256_file(directory / f),
                }
                for f in files
            },
        }
        destination.parent.mkdir(parents=True, exist_ok=True)
        partial = destination.with_name(destination.name + ".partial")
        with tarfile.open(partial, "w") as archive:
            for f in files:
                archive.add(directory / f, arcname=str(PurePosixPath(f)), recursive=False)
            body = json.dumps(record, indent=2).encode()
            info = tarfile.TarInfo(BACKUP_FILE)
            info.size = len(body)
            info.mtime = int(time.time())
            archive.addfile(info, io.BytesIO(body))
        os.replace(partial, destination)  # a backup file is complete or absent
    finally:
        ownership.release()
    return {"backup": str(destination), "files": len(files), "models": record["models"]}


def restore(source: Path, directory: Path, replace: bool = False) -> dict[str, Any]:
    """Unpack the backup ``source`` into ``directory`` (see the module docstring)."""
    if not source.is_file():
        raise NotFoundError(f"no backup at {source}")
    ownership = _owned(directory, "restore")
    try:
        existing = _index_files(directory)
        if existing and not replace:
            raise ConflictError(
                f"{directory} holds an index already: restore into an empty "
                "stores.embedded.path, or pass --replace to remove that index first"
            )
        aside = directory / RESTORE_ASIDE
        if aside.exists():
            raise ConflictError(
                f"{aside} holds the index an interrupted restore set aside: move its entries "
                f"back into {directory} (or delete it) and run the restore again"
            )
        with tempfile.TemporaryDirectory(dir=directory, prefix=".restore-") as tmp:
            staged = Path(tmp)
            record = _unpack(source, staged)
            _swap_in(staged, directory, aside)
    finally:
        ownership.release()
    return {"restored": str(directory), "files": len(record["files"]), "models": record["models"]}


def _check_listed_sizes(
    source: Path, archive: tarfile.TarFile, members: list[tarfile.TarInfo], staged: Path
) -> None:
    listings = [m for m in members if m.name == BACKUP_FILE and m.isfile()]
    if len(listings) != 1 or listings[0].size > _MAX_LISTING_BYTES:
        raise InvalidInputError(f"{source} is not a serve-app backup: no single {BACKUP_FILE}")
    handle = archive.extractfile(listings[0])
    try:
        listed = json.loads(handle.read() if handle else b"").get("files") or {}
        sizes = {str(PurePosixPath(name)): int(entry["size"]) for name, entry in listed.items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        raise InvalidInputError(f"{source} is not a serve-app backup: {BACKUP_FILE}") from None
    total = 0
    for member in members:
        if not member.isfile() or member.name == BACKUP_FILE:
            continue
        name = str(PurePosixPath(member.name))
        if sizes.get(name) != member.size:
            raise InvalidInputError(
                f"{source}: {name} ({member.size} bytes) is not in its {BACKUP_FILE} with that size"
            )
        total += member.size
    free = shutil.disk_usage(staged).free
    if total > free:
        raise InvalidInputError(
            f"{source} unpacks to {total} bytes and {staged.parent} has {free} free"
        )


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _swap_in(staged: Path, directory: Path, aside: Path) -> None:
    """Move the checked index in ``staged`` into ``directory``: the old entries aside first,
    the new ones in with the metadata last (a shard without its metadata is never taken for a
    whole index), the old ones deleted after; a failing move puts the old index back."""
    aside.mkdir()
    set_aside: list[str] = []
    moved_in: list[str] = []
    try:
        for entry in _INDEX_ENTRIES:
            if (directory / entry).exists():
                os.replace(directory / entry, aside / entry)
                set_aside.append(entry)
        for entry in (SHARD_DIR, REGISTRY_FILE, META_FILE):
            if (staged / entry).exists():
                os.replace(staged / entry, directory / entry)
                moved_in.append(entry)
    except BaseException:
        for entry in moved_in:
            _remove(directory / entry)
        for entry in set_aside:
            os.replace(aside / entry, directory / entry)
        aside.rmdir()
        raise
    shutil.rmtree(aside)


# A backup's own listing is a few hundred bytes a file: more is no backup of ours.
_MAX_LISTING_BYTES = 64 * 1024 * 1024


def _unpack(source: Path, staged: Path) -> dict[str, Any]:
    """Extract ``source`` into ``staged`` and check every file against its ``backup.json``.
    Before a byte is written: every entry must be one the listing names with the size it
    names, and the whole must fit the free space, so a compressed archive that would expand
    past the data volume (a tar bomb) is refused instead of filling it."""
    try:
        with tarfile.open(source) as archive:
            members = archive.getmembers()
            for member in members:
                top = PurePosixPath(member.name).parts[0] if member.name else ""
                if (
                    top not in (*_INDEX_ENTRIES, BACKUP_FILE)
                    or not (member.isfile() or member.isdir())
                    or member.issparse()
                ):
                    raise InvalidInputError(
                        f"{source} is not a serve-app backup: unexpected entry {member.name!r}"
                    )
            _check_listed_sizes(source, archive, members, staged)
            archive.extractall(staged, filter="data")  # no absolute paths, links or ..
    except tarfile.TarError as error:
        raise InvalidInputError(f"{source} is not a serve-app backup: {error}") from None
    try:
        record = json.loads((staged / BACKUP_FILE).read_text())
    except (FileNotFoundError, ValueError):
        raise InvalidInputError(f"{source} is not a serve-app backup: no {BACKUP_FILE}") from None
    listed = record.get("files") or {}
    if META_FILE not in listed or not any(name.startswith(f"{SHARD_DIR}/") for name in listed):
        raise InvalidInputError(
            f"{source} holds no index: a backup lists {META_FILE} and the files of {SHARD_DIR}/"
        )
    unpacked = {str(PurePosixPath(p)) for p in _index_files(staged)}
    if unpacked != set(record["files"]):
        raise InvalidInputError(f"{source}: its files differ from its {BACKUP_FILE}")
    for name, expected in record["files"].items():
        if sha256_file(staged / name) != expected["sha256"]:
            raise InvalidInputError(f"{source}: {name} does not match its SHA-256 (damaged)")
    return cast(dict[str, Any], record)
