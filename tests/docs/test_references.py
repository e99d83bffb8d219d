"""README and docs/ name only what exists: every relative link (and its #section), every
repository path in backticks, every `serve-app` command, `python -m benchmarks` suite,
`make` target and HTTP route they mention. Code comments and docstrings are held to the
same rule for the links and paths they give."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from tests.support.python_source import parse

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "helm/serve-app/README.md",
]
SOURCES = sorted(
    p
    for folder in ("serve_app", "deployments", "benchmarks", "scripts", "helm", "config")
    for p in (ROOT / folder).rglob("*")
    if p.suffix in {".py", ".sh", ".yaml", ".tpl"} and "results" not in p.parts
)
TOP = (
    "serve_app",
    "deployments",
    "benchmarks",
    "docs",
    "config",
    "helm",
    "k8s",
    "tests",
    "scripts",
)
# A repository path: a top folder, then a file with an extension or a folder with its slash
# (extension-less words such as a report's stem or "docs/s" are not taken for paths).
PATH = re.compile(
    r"(?<![\w./${}-])((?:" + "|".join(TOP) + r")/(?:[\w.-]+/)*(?:[\w.-]*[\w-]\.[A-Za-z]\w*|)"
    r"|README\.md|Makefile|Dockerfile)(?![\w/-]|\.\w)(?:#([\w-]+))?"
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`|```[^\n]*\n(.*?)```", re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", markdown.read_text(), flags=re.S)
    return {slug(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.M)}


def exists(relative: str) -> bool:
    relative = relative.rstrip("/").rstrip(".")
    if any(ch in relative for ch in "*<>{}$"):
        return True  # a pattern or a placeholder, not a path
    return (ROOT / relative).exists()


def broken_paths(text: str, base: Path) -> list[str]:
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or (target.startswith("#") and base.suffix != ".md"):
            continue
        path, _, anchor = target.partition("#")
        file = (base.parent / path).resolve() if path else base
        if path and not file.exists():
            broken.append(f"link {target}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"section {target}")
    for path, anchor in PATH.findall(text):
        if not exists(path):
            broken.append(f"path {path}")
        elif anchor and path.endswith(".md") and anchor not in anchors(ROOT / path):
            broken.append(f"section {path}#{anchor}")
    return broken


# A section named in prose: see "Upgrades", ("Node disk")
NAMED_SECTION = re.compile(r'(?:\bsee |\()"([A-Z][^"\n]{2,79})"')


def broken_section_names(text: str) -> list[str]:
    headings = set().union(*(anchors(doc) for doc in DOCS))
    return [
        f'section "{name}"' for name in NAMED_SECTION.findall(text) if slug(name) not in headings
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_name_files_and_sections_that_exist(doc):
    text = doc.read_text()
    assert broken_paths(text, doc) + broken_section_names(text) == []


def comments(source: Path) -> str:
    """A source file's comments and docstrings (what it tells the reader, not what it runs)."""
    text = source.read_text(errors="replace")
    if source.suffix != ".py":
        return "\n".join(line.partition("#")[2] for line in text.splitlines() if "#" in line)
    found = [
        t.string
        for t in tokenize.generate_tokens(io.StringIO(text).readline)
        if t.type == tokenize.COMMENT
    ]
    for node in ast.walk(parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            found.append(ast.get_docstring(node) or "")
    return "\n".join(found)


def test_code_comments_name_files_and_sections_that_exist():
    broken = {
        str(source.relative_to(ROOT)): found
        for source in SOURCES
        if (found := broken_paths(comments(source), source))
    }
    assert broken == {}


def code_spans(text: str) -> list[str]:
    return [inline or block for inline, block in CODE.findall(text)]


@pytest.fixture(scope="module")
def known():
    from benchmarks.__main__ import SUITES
    from deployments.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    makefile = (ROOT / "Makefile").read_text()
    return {
        "commands": set(sub.choices),
        "suites": set(SUITES),
        "targets": set(re.findall(r"^([\w-]+):", makefile, re.M)),
    }


@pytest.fixture(scope="module")
def routes(local_config) -> set[tuple[str, str]]:
    from serve_app.api.app import create_app
    from serve_app.service import RetrievalService

    service = RetrievalService.__new__(RetrievalService)  # the routes need no model or store
    service.config = local_config
    app = create_app(service)
    found = {
        (method.upper(), re.sub(r"\{[^}]+\}", "{}", path))
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    }
    for route in app.routes:  # the routes kept out of the schema (/docs, probes)
        for method in getattr(route, "methods", None) or ():
            found.add((method, getattr(route, "path", "")))
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_name_commands_suites_targets_and_routes_that_exist(doc, known, routes):
    unknown = []
    for span in code_spans(doc.read_text()):
        for line in span.splitlines():  # a command line: serve-app first (or its path)
            command = re.match(
                r"\s*(?:\$\s*)?(?:\S*/)?serve-app(?:\s+--config\s+\S+)?\s+([a-z][\w-]*)(?=\s|$)",
                line,
            )
            if command and command[1] not in known["commands"]:
                unknown.append(f"serve-app {command[1]}")
        for suite in re.findall(r"python -m benchmarks\s+([a-z][\w-]*)", span):
            if suite not in known["suites"]:
                unknown.append(f"python -m benchmarks {suite}")
        for target in re.findall(r"(?:^|\s)make\s+([a-z][\w-]*)", span):
            if target not in known["targets"]:
                unknown.append(f"make {target}")
        for method, path in re.findall(r"\b(GET|POST|PUT|DELETE|PATCH)\s+(/[\w/{}.-]*)", span):
            path = re.sub(r"\{[^}]+\}", "{}", path.split("?")[0]).rstrip(".")
            path = path.removesuffix("...")
            if (method, path) not in routes and not path.endswith("/"):
                unknown.append(f"{method} {path}")
    assert unknown == []
