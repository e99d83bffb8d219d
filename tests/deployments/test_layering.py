"""Imports point one way: the library imports nothing of Ray or of the Ray Serve layer, and
inside that layer the replicas (what runs in Ray) import none of the parts that start it
(the graph builder, the local launcher, the cluster CLI, the console script)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.python_source import parse

ROOT = Path(__file__).resolve().parents[2]

# Each part, and the top-level names it may import from this repository's two packages.
ALLOWED = {
    "serve_app": {"serve_app"},
    "deployments/settings.py": {"serve_app"},
    "deployments/replicas": {"serve_app", "deployments.settings", "deployments.replicas"},
    "deployments/builder": {
        "serve_app",
        "deployments.settings",
        "deployments.replicas",
        "deployments.builder",
    },
    "deployments/local": {
        "serve_app",
        "deployments.settings",
        "deployments.builder",
        "deployments.local",
    },
    "deployments/cluster.py": {"serve_app"},
}
OURS = ("serve_app", "deployments", "ray")


def imported(source: Path) -> set[str]:
    """Every module the file imports, at the top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(parse(source.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def allowed(module: str, prefixes: set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_each_part_imports_only_what_it_may(part):
    path = ROOT / part
    sources = [path] if path.suffix else sorted(path.rglob("*.py"))
    assert sources and all(s.exists() for s in sources), f"{part} has no modules"
    wrong = {
        f"{source.relative_to(ROOT)}: {module}"
        for source in sources
        for module in imported(source)
        if module.split(".")[0] in OURS
        and not allowed(module, ALLOWED[part])
        # Ray itself is what the Ray Serve layer wraps; the library never imports it.
        and not (module.split(".")[0] == "ray" and part != "serve_app")
    }
    assert sorted(wrong) == []
