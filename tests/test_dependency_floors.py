"""The project's own dependency floors exclude the releases with known advisories on the
paths it uses (JWT checks, multipart uploads): ``pip install`` in an environment that
already holds an old release keeps it when the floor allows it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
VULNERABLE = {
    "pyjwt": ["2.10.0"],  # CVE-2024-53861: a partial issuer match passed
    "python-multipart": ["0.0.9", "0.0.17", "0.0.22", "0.0.26", "0.0.30"],  # DoS, smuggling
}


def floors() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = {}
    for line in [*project["dependencies"], *project["optional-dependencies"]["serve"]]:
        requirement = Requirement(line)
        found[requirement.name.lower()] = requirement
    return found


@pytest.mark.parametrize("name", sorted(VULNERABLE))
def test_the_floor_excludes_the_vulnerable_releases(name):
    requirement = floors()[name]
    admitted = [v for v in VULNERABLE[name] if requirement.specifier.contains(v)]
    assert not admitted, f"{requirement} admits {admitted}"
