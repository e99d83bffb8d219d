"""The RayService fields KubeRay marks deprecated, read from its Go API types.

KubeRay documents deprecation in the doc comment of a struct field (``// Deprecated: ...``) in
``ray-operator/apis/ray/v1/*_types.go``. ``deprecated_paths`` walks the types from ``RayService``
down (spec and status, the RayCluster types included) and returns each deprecated field as a
JSON path in a RayService object: ``spec.serviceUnhealthySecondThreshold``,
``status.activeServiceStatus.rayClusterStatus.state`` (``[]`` a list item, ``{}`` a map value).

The tests cannot fetch KubeRay, so the list for v1.7.0 is checked in beside this module
(``kuberay-v1.7.0-deprecated.yaml``), written by::

    python -m tests.helm.kuberay_types <kuberay git dir> v1.7.0 > tests/helm/kuberay-v1.7.0-deprecated.yaml
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

TYPE_FILES = ("rayservice_types.go", "raycluster_types.go")
DEPRECATED_LIST = Path(__file__).with_name("kuberay-v1.7.0-deprecated.yaml")

_STRUCT = re.compile(r"^type (\w+) struct \{$")
_FIELD = re.compile(r"^\t(?:(\w+)\s+)?([\w.*\[\]]+)\s+`[^`]*json:\"([^\",]*)")


@dataclass(frozen=True)
class Field:
    go_name: str
    go_type: str
    json_name: str
    deprecated: str | None  # the comment's "Deprecated" sentence, or None
    source: str  # file:line


def parse_structs(text: str, filename: str) -> dict[str, list[Field]]:
    """Struct name -> its fields with json tags (embedded fields have an empty go_name)."""
    structs: dict[str, list[Field]] = {}
    current: list[Field] | None = None
    comment: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if current is None:
            found = _STRUCT.match(line)
            if found:
                current = structs.setdefault(found.group(1), [])
                comment = []
            continue
        if line == "}":
            current = None
            continue
        stripped = line.strip()
        if stripped.startswith("//"):
            text = stripped[2:].strip()
            if not text.startswith("+"):  # kubebuilder markers are no prose
                comment.append(text)
            continue
        field = _FIELD.match(line)
        if field:
            doc = " ".join(comment)
            marked = re.search(r"Deprecated:?.*", doc) if "Deprecated" in doc else None
            name, go_type = field.group(1) or "", field.group(2)
            current.append(
                Field(name, go_type, field.group(3), marked.group(0) if marked else None,
                      f"{filename}:{number}")
            )  # fmt: skip
        comment = []
    return structs


def _walk(type_expr: str) -> tuple[str, str]:
    """(path suffix for containers, element type): *T -> ("", T), []T -> ("[]", T),
    map[K]V -> ("{}", V)."""
    suffix = ""
    while True:
        if type_expr.startswith("*"):
            type_expr = type_expr[1:]
        elif type_expr.startswith("[]"):
            suffix, type_expr = suffix + "[]", type_expr[2:]
        elif type_expr.startswith("map["):
            suffix, type_expr = suffix + "{}", type_expr[type_expr.index("]") + 1 :]
        else:
            return suffix, type_expr


def deprecated_paths(
    structs: dict[str, list[Field]], root: str = "RayService"
) -> dict[str, dict[str, str]]:
    """JSON path -> {"field": Struct.Field, "source": file:line, "comment": ...} for every
    deprecated field reachable from ``root``."""
    found: dict[str, dict[str, str]] = {}

    def visit(struct: str, prefix: str, seen: tuple[str, ...]) -> None:
        for field in structs.get(struct, []):
            suffix, element = _walk(field.go_type)
            if field.json_name in ("", "-"):  # inline (embedded) or not serialised
                path = prefix.rstrip(".")
            else:
                path = f"{prefix}{field.json_name}{suffix}"
            if field.deprecated:
                found[path] = {
                    "field": f"{struct}.{field.go_name}",
                    "source": field.source,
                    "comment": field.deprecated,
                }
            if element in structs and element not in seen:
                visit(element, f"{path}." if path else "", (*seen, element))

    visit(root, "", (root,))
    return found


def values_at(node: Any, path: str) -> list[Any]:
    """Every value at ``path`` in a parsed object (``[]`` list items, ``{}`` map values)."""
    nodes = [node]
    for part in path.split("."):
        name = part.rstrip("[]{}")
        containers = part[len(name) :]
        nodes = [n[name] for n in nodes if isinstance(n, dict) and name in n]
        for marker in re.findall(r"\[\]|\{\}", containers):
            if marker == "[]":
                nodes = [item for n in nodes if isinstance(n, list) for item in n]
            else:
                nodes = [v for n in nodes if isinstance(n, dict) for v in n.values()]
    return nodes


def load_deprecated() -> dict[str, dict[str, str]]:
    return yaml.safe_load(DEPRECATED_LIST.read_text())["deprecated"]


def main(argv: list[str]) -> int:
    git_dir, tag = argv
    structs: dict[str, list[Field]] = {}
    for name in TYPE_FILES:
        path = f"ray-operator/apis/ray/v1/{name}"
        text = subprocess.run(
            ["git", "-C", git_dir, "show", f"{tag}:{path}"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        structs.update(parse_structs(text, path))
    print(
        f"# Derived by `python -m tests.helm.kuberay_types <kuberay> {tag}` from\n"
        f"# github.com/ray-project/kuberay {', '.join(TYPE_FILES)} at {tag}\n"
        "# (ray-operator/apis/ray/v1/): RayService fields whose doc comment says Deprecated."
    )
    print(yaml.safe_dump({"tag": tag, "deprecated": deprecated_paths(structs)}, width=100))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
