"""The fetch manifest: which revision of a Hub model a cache folder holds, and its files'
SHA-256, recorded by the model fetch beside the folder (``<cache>/<owner>/<name>.manifest.json``
next to ``<cache>/<owner>/<name>/``, so the folder stays byte for byte the repository's).

The cache is keyed by revision: the fetch writes a model pinned to a commit into
``<owner>/<name>@<commit>`` (``revision_folder``), and a process configured with ``/models/
<owner>/<name>`` and that revision loads that folder (``model_folder``). A fetch for a new
revision so never writes a folder a running cluster reads, and a rollback finds the old one.

A process that loads a model from a folder with a manifest takes the revision from it
(``loaded_revision``): that is the revision the index records (stores' model binding), and a
configured revision (``dense.revision`` ...) that differs from it is refused before anything
is served. Folders without a manifest (``package:`` models, paths filled by hand) have the
configured revision, or none.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from serve_app.errors import ModelMismatchError

MANIFEST_SUFFIX = ".manifest.json"
MANIFEST_VERSION = 1


def manifest_path(folder: str | Path) -> Path:
    folder = Path(folder)
    return folder.with_name(folder.name + MANIFEST_SUFFIX)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(folder: str | Path) -> dict[str, Any] | None:
    """The manifest beside ``folder``; None when there is none."""
    path = manifest_path(folder)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def write_manifest(
    folder: Path, repo_id: str, revision: str, files: dict[str, dict[str, Any]]
) -> Path:
    """Write the manifest atomically (a reader sees the old one or the new one):
    ``files`` maps each file name to ``{"size": ..., "sha256": ...}``."""
    path = manifest_path(folder)
    body = {
        "version": MANIFEST_VERSION,
        "repo_id": repo_id,
        "revision": revision,
        "files": dict(sorted(files.items())),
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(body, handle, indent=2)
    os.replace(tmp, path)
    return path


def revision_folder(folder: str | Path, revision: str) -> Path:
    """Where the model fetch writes ``folder``'s repository at the commit ``revision``."""
    folder = Path(folder)
    return folder.with_name(f"{folder.name}@{revision}")


def model_folder(spec: str, revision: str | None) -> str:
    """The reference a process loads for ``spec`` configured at ``revision``: the folder the
    model fetch keyed by that revision where it exists, else ``spec`` itself (a folder filled
    by hand, a ``package:`` model, a Hub id, an unpinned fetch)."""
    if revision and spec and not spec.startswith(("package:", "catalog:")):
        keyed = revision_folder(Path(spec).expanduser(), revision)
        if keyed.is_dir():
            return str(keyed)
    return spec


def _local_folder(spec: str) -> Path | None:
    """The folder a model reference names on this machine, if it exists here."""
    if not spec or spec.startswith(("package:", "catalog:")):
        return None  # an installed package pins its own files (its version)
    folder = Path(spec).expanduser()
    return folder if folder.is_dir() else None


def _is_hub_id(spec: str) -> bool:
    """``owner/name`` that the loaders would resolve on the Hub (or in its cache), rather than
    a path (which may exist only on another machine: the chart's ``/models/...``)."""
    if not spec or spec.startswith(("package:", "catalog:", "/", ".", "~")):
        return False
    return _local_folder(spec) is None


def loaded_revision(spec: str, configured: str | None, field: str) -> str | None:
    """The revision of the weights a process loading ``spec`` loads: the manifest's where the
    folder has one (refusing a configured revision that differs), else ``configured``.

    A revision on a bare Hub id is refused: the loaders take the id's default branch (the
    HF cache's ``refs/main`` offline), so nothing here could make them load the pinned commit
    or check that they did; the model fetch writes the pinned commit to a folder with a
    manifest, which is what a pin is checked against."""
    spec = model_folder(spec, configured)
    folder = _local_folder(spec)
    if configured is not None and _is_hub_id(spec):
        raise ModelMismatchError(
            f"{field} is {configured} but the model {spec!r} is a Hub id, not a fetched folder: "
            "the loader would take whatever the Hub (or its cache) holds for the default "
            f"branch. Fetch it (python -m serve_app.model_fetch --cache DIR "
            f"{spec}@{configured}) and configure the folder it lands in, "
            "or drop the revision"
        )
    manifest = read_manifest(folder) if folder is not None else None
    if manifest is None:
        return configured
    recorded = manifest["revision"]
    if configured is not None and configured != recorded:
        raise ModelMismatchError(
            f"{field} is {configured} but the model cache holds {manifest['repo_id']} at "
            f"revision {recorded} ({manifest_path(folder)}): fetch the configured revision "
            "(the chart's model fetch) or configure the revision the cache holds"
        )
    return recorded
