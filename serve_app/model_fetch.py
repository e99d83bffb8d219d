"""Fetch the configured models from the Hugging Face Hub into the model cache.

The chart's model-fetch Job (a Helm pre-install/pre-upgrade/pre-rollback hook) runs
``python -m serve_app.model_fetch --cache /models Qwen/Qwen3-Embedding-8B@<commit> ...``:
each repository pinned to a commit lands in ``<cache>/<owner>/<name>@<commit>``, the folder a
replica configured with ``dense.model: /models/Qwen/Qwen3-Embedding-8B`` and that
``dense.revision`` loads offline (serve_app/model_manifest.py: ``model_folder``); one without a
commit in ``<cache>/<owner>/<name>``. A fetch for an upgrade's new revision so never writes
the folder the running cluster reads, and a rollback finds the old revision's folder.
``--keep-revisions N`` then removes the folders of a repository's other commits beyond the N
most recently fetched (the manifest's time: every fetch that wants a folder rewrites it).
Without ids,
``--config FILE`` derives them from the configuration's model paths under ``--cache``, as the
chart does, each with the revision the configuration pins (``dense.revision`` ...). An id may
carry a revision: ``owner/name@<commit, tag or branch>``; ``--pinned`` (the chart) refuses an id
without a commit. ``tokenizer:owner/name@...`` fetches the tokenizer and configuration files
only: what a group needs whose deployments only count or make tokens with that model (the
chunker, a dense model served by a vLLM server).

Beside each folder the fetch writes ``<owner>/<name>.manifest.json`` (serve_app/
model_manifest.py): the commit it holds and each file's size and SHA-256, checked against the
Hub's own SHA-256 of the LFS files (the weights); a replica that loads the folder takes its
revision from there, and the index records it.

Only what loading needs is fetched: the repository's top-level configuration and tokenizer files
and one copy of the weights (the safetensors files where there are any, else PyTorch's
``pytorch_model*.bin``); never ONNX, OpenVINO, TensorFlow or Flax copies, sub-folders
(sentence-transformers modules, ``onnx/``) or READMEs. A model already complete at the
repository's current commit is skipped without downloading anything: huggingface_hub's
``local_dir`` metadata (``<dest>/.cache/huggingface/``) records each file's commit, and the
repository's file list is cached there per commit.

The token comes from ``HF_TOKEN`` (the chart sets it from a Secret). Exit status 0 when every
model is complete, 1 when any failed (one line per failure saying why: gated repository without
a token or without access, unknown repository or revision, rejected token, full or read-only
disk, unreachable Hub), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from serve_app.model_manifest import (
    manifest_path,
    read_manifest,
    revision_folder,
    sha256_file,
    write_manifest,
)

# owner/name as the Hub spells them, optionally @revision (a commit, tag or branch).
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_REVISION = re.compile(r"^[\w./-]+$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
TOKENIZER_PREFIX = "tokenizer:"

# Files a transformers / vLLM / tokenizers load reads from a model folder, besides the weights:
# configs (config.json, generation_config.json, tokenizer_config.json, ...), vocabularies
# (vocab.txt, merges.txt, vocab.json), SentencePiece and tiktoken models, chat templates.
_SUPPORT_SUFFIXES = (".json", ".txt", ".model", ".tiktoken", ".jinja")


class FetchError(Exception):
    """A model could not be fetched; the message says why and what to do."""


@dataclass(frozen=True)
class ModelSpec:
    repo_id: str
    revision: str | None = None
    tokenizer_only: bool = False

    @classmethod
    def parse(cls, spec: str) -> ModelSpec:
        text = spec.strip()
        tokenizer_only = text.startswith(TOKENIZER_PREFIX)
        repo_id, _, revision = text.removeprefix(TOKENIZER_PREFIX).partition("@")
        if not _REPO_ID.fullmatch(repo_id) or ".." in repo_id:
            raise ValueError(
                f"{spec!r} is not a model id ([tokenizer:]owner/name, optionally @revision)"
            )
        if "@" in text and not _REVISION.fullmatch(revision):
            raise ValueError(f"{spec!r}: bad revision {revision!r}")
        return cls(repo_id, revision or None, tokenizer_only)

    @property
    def pinned(self) -> bool:
        """Pinned to a commit (a tag or a branch can move)."""
        return self.revision is not None and bool(_COMMIT.fullmatch(self.revision))

    def __str__(self) -> str:
        prefix = TOKENIZER_PREFIX if self.tokenizer_only else ""
        return prefix + self.repo_id + (f"@{self.revision}" if self.revision else "")


def select_files(names: Iterable[str], tokenizer_only: bool = False) -> list[str]:
    """The files of a repository that loading needs (see the module docstring); without the
    weights for ``tokenizer_only``."""
    top = sorted({name for name in names if "/" not in name})
    safetensors = [name for name in top if name.endswith(".safetensors")]
    if safetensors:
        weights = [*safetensors, *(n for n in top if n.endswith(".safetensors.index.json"))]
    else:
        weights = [
            n
            for n in top
            if (n.startswith("pytorch_model") and n.endswith(".bin"))
            or n == "pytorch_model.bin.index.json"
        ]
    support = [n for n in top if n.endswith(_SUPPORT_SUFFIXES) and not n.endswith(".index.json")]
    return sorted(support if tokenizer_only else {*weights, *support})


def model_references(config) -> dict[str, list[str]]:
    """The model references (paths, ids or ``package:`` folders) each Serve deployment loads,
    as the deployments load them (the chart mirrors this to mount the cache where it is read).
    """
    dense = [config.dense.model]
    chunker = [config.chunker.tokenizer or config.dense.model]  # build_chunker's tokenizer
    if config.chunker.semantic_split:  # the chunker then embeds sentences with the dense model
        chunker.append(config.dense.model)
    refs = {"chunker": list(dict.fromkeys(chunker)), "dense": dense}
    if config.splade.enabled:
        refs["splade"] = [config.splade.model]
    if config.reranker.enabled:
        refs["reranker"] = [config.reranker.model]
    if config.llm.enabled and not config.llm.model.startswith(("catalog:", "package:")):
        refs["llm"] = [config.llm.model]
    return refs


def tokenizer_references(config) -> dict[str, list[str]]:
    """Per deployment, the references of ``model_references`` whose tokenizer (and
    configuration files) is all it loads: the chunker counts tokens (unless it embeds
    sentences with that very model), a dense model served by a vLLM server is tokenised here."""
    out: dict[str, list[str]] = {}
    tokenizer = config.chunker.tokenizer or config.dense.model
    if not (config.chunker.semantic_split and tokenizer == config.dense.model):
        out["chunker"] = [tokenizer]
    if config.dense.backend == "vllm-http":
        out["dense"] = [config.dense.model]
    return out


def configured_revisions(config) -> dict[str, str]:
    """Model reference -> the revision the configuration pins for it (``<section>.revision``;
    the chunker's tokenizer: ``AppConfig.chunker_tokenizer``). Two different pins of one
    reference are refused."""
    pins = [config.chunker_tokenizer(), (config.dense.model, config.dense.revision)]
    if config.splade.enabled:
        pins.append((config.splade.model, config.splade.revision))
    if config.reranker.enabled:
        pins.append((config.reranker.model, config.reranker.revision))
    if config.llm.enabled:
        pins.append((config.llm.model, config.llm.revision))
    revisions: dict[str, str] = {}
    for ref, revision in pins:
        if revision is None:
            continue
        if revisions.setdefault(ref, revision) != revision:
            raise FetchError(
                f"{ref} is pinned to two revisions ({revisions[ref]} and {revision}): configure one"
            )
    return revisions


DEPLOYMENTS = ("chunker", "dense", "splade", "reranker", "llm")


def cache_ids(config, cache: str | Path, deployments: Iterable[str] = DEPLOYMENTS) -> list[str]:
    """Model specs of the configuration's model paths under ``cache`` that ``deployments``
    load, in first-use order, each with its configured revision and ``tokenizer:`` where no
    deployment of them loads more than its tokenizer: ``/models/Qwen/Qwen3-Embedding-8B``
    under ``/models`` is ``Qwen/Qwen3-Embedding-8B@<dense.revision>``."""
    root = PurePosixPath(cache)
    refs, tokenizer = model_references(config), tokenizer_references(config)
    revisions = configured_revisions(config)
    whole: dict[str, bool] = {}  # repo id -> some deployment loads its weights
    ref_of: dict[str, str] = {}
    for name in (n for n in DEPLOYMENTS if n in set(deployments)):
        for ref in refs.get(name, []):
            path = PurePosixPath(ref)
            if not path.is_absolute() or root not in path.parents:
                continue
            repo_id = str(path.relative_to(root))
            if not _REPO_ID.fullmatch(repo_id):
                raise FetchError(
                    f"{ref} is under {root} but {repo_id!r} is not a Hub id (owner/name): "
                    "name the models to fetch explicitly"
                )
            ref_of.setdefault(repo_id, ref)
            loads_weights = ref not in tokenizer.get(name, [])
            whole[repo_id] = whole.get(repo_id, False) or loads_weights
    return [
        str(ModelSpec(repo_id, revisions.get(ref_of[repo_id]), not loads_weights))
        for repo_id, loads_weights in whole.items()
    ]


def cache_folder(cache: Path, spec: ModelSpec) -> Path:
    """Where ``spec`` lands in the cache: keyed by its commit where it is pinned to one."""
    folder = cache / spec.repo_id
    return revision_folder(folder, spec.revision) if spec.pinned and spec.revision else folder


def prune_revisions(cache: Path, repo_id: str, keep: int) -> list[Path]:
    """Remove the folders (and manifests) of ``repo_id``'s commits beyond the ``keep`` most
    recently fetched; returns the removed folders. A folder without a manifest (a fetch cut
    short) counts as the oldest."""
    base = cache / repo_id
    keyed = [
        p
        for p in base.parent.glob(f"{base.name}@*")
        if p.is_dir() and _COMMIT.fullmatch(p.name.rpartition("@")[2])
    ]

    def fetched_at(folder: Path) -> int:
        try:
            return manifest_path(folder).stat().st_mtime_ns
        except FileNotFoundError:
            return -1

    removed = sorted(keyed, key=fetched_at, reverse=True)[keep:]
    for folder in removed:
        manifest_path(folder).unlink(missing_ok=True)
        shutil.rmtree(folder)
    return removed


@dataclass(frozen=True)
class Fetched:
    spec: ModelSpec
    commit: str
    dest: Path
    files: int
    fetched: int
    fetched_bytes: int


def _free_bytes(path: Path) -> int:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return shutil.disk_usage(existing).free


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB" if size >= 2**28 else f"{size / 2**20:.1f} MiB"


def fetch(
    spec: ModelSpec,
    cache: Path,
    *,
    token: str | None,
    token_source: str,
    max_workers: int = 8,
) -> Fetched:
    """Download ``spec`` into its cache folder (``cache_folder``); raises FetchError saying
    why it could not."""
    from huggingface_hub import HfApi, get_token, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    dest = cache_folder(cache, spec)
    has_token = bool(token or get_token())
    no_token = f"no Hugging Face token was given ({token_source})"
    try:
        info = HfApi(token=token).model_info(
            spec.repo_id, revision=spec.revision, files_metadata=True
        )
        if info.gated and not has_token:
            raise FetchError(
                f"{spec} is a gated repository and {no_token}: accept its terms at "
                f"{_endpoint()}/{spec.repo_id} and give that account's token"
            )
        sizes = {s.rfilename: s.size or 0 for s in info.siblings or []}
        hub_sha256 = {s.rfilename: s.lfs.sha256 for s in info.siblings or [] if s.lfs}
        files = select_files(sizes, spec.tokenizer_only)
        if not files:
            raise FetchError(f"{spec} has no model or tokenizer files at its top level")
        before = {f: _stamp(dest / f) for f in files}
        needed = sum(sizes[f] for f in files if not _complete(dest / f, sizes[f]))
        free = _free_bytes(dest)
        if needed > free:
            raise FetchError(
                f"{spec} needs {_gib(needed)} more in {cache} but only {_gib(free)} is free: "
                "grow the cache volume (modelCache.size)"
            )
        snapshot_download(
            spec.repo_id,
            revision=info.sha,  # a commit: every file comes from the same one
            local_dir=dest,
            token=token,
            allow_patterns=[_literal(f) for f in files],
            max_workers=max_workers,
        )
    except FetchError:
        raise
    except GatedRepoError as error:  # before RepositoryNotFoundError, its base class
        why = no_token if not has_token else f"the token ({token_source}) has no access to it"
        raise FetchError(
            f"{spec} is a gated repository and {why}: accept its terms at "
            f"{_endpoint()}/{spec.repo_id} with the token's account ({_first_line(error)})"
        ) from error
    except RevisionNotFoundError as error:
        raise FetchError(f"{spec}: revision {spec.revision!r} does not exist") from error
    except RepositoryNotFoundError as error:
        raise FetchError(
            f"{spec} was not found on the Hub (a typo, or a private repository the "
            f"{'token cannot see' if has_token else 'anonymous user cannot see: ' + no_token})"
        ) from error
    except HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else None
        if status == 401:
            raise FetchError(
                f"{spec}: the Hub rejected the token ({token_source}): invalid or expired"
            ) from error
        raise FetchError(f"{spec}: the Hub answered {status}: {_first_line(error)}") from error
    except PermissionError as error:
        raise FetchError(
            f"{spec}: cannot write to {dest} ({error.strerror}): the cache volume must be "
            f"mounted read-write and writable by uid {os.getuid()} / gid {os.getgid()}"
        ) from error
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise FetchError(
                f"{spec}: no space left in {cache}: grow the cache volume (modelCache.size)"
            ) from error
        if isinstance(error, LocalEntryNotFoundError) or error.errno is None:
            raise FetchError(
                f"{spec}: the Hub could not be reached ({_endpoint()}): {_first_line(error)}"
            ) from error
        raise FetchError(f"{spec}: {type(error).__name__}: {error}") from error
    except Exception as error:  # httpx2's connection errors and timeouts are no OSError
        raise FetchError(
            f"{spec}: the Hub could not be reached ({_endpoint()}): "
            f"{type(error).__name__}: {_first_line(error)}"
        ) from error
    incomplete = [f for f in files if not _complete(dest / f, sizes[f])]
    if incomplete:
        raise FetchError(f"{spec}: files still missing after the download: {incomplete}")
    fetched = [f for f in files if _stamp(dest / f) != before[f]]  # written (or replaced) now
    record_manifest(spec, info.sha, dest, files, set(fetched), hub_sha256)
    return Fetched(spec, info.sha, dest, len(files), len(fetched), sum(sizes[f] for f in fetched))


def record_manifest(
    spec: ModelSpec,
    commit: str,
    dest: Path,
    files: list[str],
    fetched: set[str],
    hub_sha256: Mapping[str, str],
) -> None:
    """Write the manifest beside ``dest``: each file's size and SHA-256 (hashed again only
    when written now or not recorded yet at this commit), the LFS files' checked against the
    Hub's; a file that differs is removed so that the next fetch downloads it again."""
    previous = read_manifest(dest)
    known = previous["files"] if previous and previous.get("revision") == commit else {}
    entries: dict[str, dict] = {}
    for name in [*files, *(n for n in known if n not in files)]:
        path = dest / name
        if not path.is_file():
            continue
        size = path.stat().st_size
        entry = known.get(name)
        if name in fetched or entry is None or entry.get("size") != size:
            entry = {"size": size, "sha256": sha256_file(path)}
        expected = hub_sha256.get(name)
        if expected and entry["sha256"] != expected:
            path.unlink()
            raise FetchError(
                f"{spec}: {name} has SHA-256 {entry['sha256']} but the Hub lists {expected} "
                "at that commit: removed; fetch again"
            )
        entries[name] = entry
    write_manifest(dest, spec.repo_id, commit, entries)


def _complete(path: Path, size: int) -> bool:
    return path.is_file() and path.stat().st_size == size


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def _literal(name: str) -> str:
    """An allow pattern (fnmatch) that matches exactly ``name``."""
    return "".join(f"[{c}]" if c in "*?[]" else c for c in name)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return next((line for line in text.splitlines() if line.strip()), type(error).__name__)


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m serve_app.model_fetch",
        description="Fetch Hugging Face model repositories into <cache>/<owner>/<name>[@commit].",
    )
    parser.add_argument("models", nargs="*", help="[tokenizer:]owner/name[@revision] ...")
    parser.add_argument("--cache", required=True, help="the model cache root (e.g. /models)")
    parser.add_argument(
        "--config", help="derive the ids from this configuration's model paths under --cache"
    )
    parser.add_argument(
        "--token-source",
        default="HF_TOKEN",
        help="where the token comes from, for error messages",
    )
    parser.add_argument("--max-workers", type=int, default=8, help="files downloaded at once")
    parser.add_argument(
        "--keep-revisions",
        type=int,
        default=0,
        metavar="N",
        help="after the fetch, remove each fetched repository's other commits' folders beyond "
        "the N most recently fetched (0: keep every one)",
    )
    parser.add_argument(
        "--pinned",
        action="store_true",
        help="refuse a model without a commit as its revision (a tag or branch can move)",
    )
    return parser


OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
"""huggingface_hub goes offline when either is true (the image sets HF_HUB_OFFLINE=1)."""


def offline_switch(environ: Mapping[str, str]) -> str | None:
    """The variable in ``environ`` that would keep huggingface_hub offline, if any."""
    for name in OFFLINE_SWITCHES:
        if environ.get(name, "").strip().lower() in ("1", "true", "yes", "on"):
            return name
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    offline = offline_switch(os.environ)
    if offline:
        print(
            f"error: {offline} is set: the fetch must download; set it to 0 or unset it",
            file=sys.stderr,
        )
        return 2
    try:
        ids = list(args.models)
        if args.config:
            from serve_app.config import load_config

            ids += [i for i in cache_ids(load_config(args.config), args.cache) if i not in ids]
        specs = [ModelSpec.parse(i) for i in ids]
    except (ValueError, FetchError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    unpinned = [spec for spec in specs if args.pinned and not spec.pinned]
    for spec in unpinned:
        print(
            f"error: {spec} is not pinned: give its commit (owner/name@<40 hex digits>; in the "
            "configuration <section>.revision)",
            file=sys.stderr,
        )
    if unpinned:
        return 2
    if not specs:
        print("error: no models to fetch (give ids or --config)", file=sys.stderr)
        return 2
    if not sys.stderr.isatty():
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()  # a Job's log is no terminal: one line per model instead
    token = os.environ.get("HF_TOKEN") or None
    failures = 0
    for spec in specs:
        try:
            done = fetch(
                spec,
                Path(args.cache),
                token=token,
                token_source=args.token_source,
                max_workers=args.max_workers,
            )
        except FetchError as error:
            failures += 1
            print(f"FAILED {error}", file=sys.stderr, flush=True)
            continue
        state = (
            f"fetched {done.fetched} of {done.files} files ({_gib(done.fetched_bytes)})"
            if done.fetched
            else f"already complete ({done.files} files)"
        )
        print(f"ok {spec} @ {done.commit[:12]}: {state} -> {done.dest}", flush=True)
        if args.keep_revisions > 0 and spec.pinned:
            for folder in prune_revisions(Path(args.cache), spec.repo_id, args.keep_revisions):
                print(f"removed {folder} (beyond the {args.keep_revisions} latest)", flush=True)
    if failures:
        print(f"{failures} of {len(specs)} models failed", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
