"""The Dockerfile read without Docker: its instructions (dockerfile-parse), the build context
that `.dockerignore` lets through, and its COPY instructions replayed into a folder. CI then
installs from the same files that `docker build` would copy into the image.

Supported `.dockerignore` syntax: Docker's, less character classes. `*` and `?` do not cross
`/`, `**` spans folders, a leading `!` re-includes, the last matching line wins, and a line
that matches a folder matches everything under it.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = "scripts/install_image.sh"


def parse(dockerfile: Path = ROOT / "Dockerfile") -> DockerfileParser:
    return DockerfileParser(path=str(dockerfile))


def instructions(parser: DockerfileParser, name: str) -> list[str]:
    return [i["value"] for i in parser.structure if i["instruction"] == name]


def _translate(pattern: str) -> re.Pattern[str]:
    if "[" in pattern or "\\" in pattern:
        raise ValueError(
            f".dockerignore pattern {pattern!r}: character classes are not supported here"
        )
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignore_rules(root: Path = ROOT) -> list[tuple[bool, re.Pattern[str]]]:
    """(re-include?, pattern) for each line of .dockerignore, in order."""
    rules = []
    for line in (root / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.removeprefix("!").strip().strip("/")
        rules.append((negated, _translate(pattern)))
    return rules


def excluded(relative: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether the context leaves out ``relative`` (a path relative to the context root)."""
    parts = relative.strip("/").split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for negated, pattern in rules:
        if any(pattern.fullmatch(prefix) for prefix in prefixes):
            verdict = not negated
    return verdict


def copies(parser: DockerfileParser) -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY, with its flags (--chown, ...) dropped."""
    result = []
    for value in instructions(parser, "COPY"):
        words = [w for w in shlex.split(value) if not w.startswith("--")]
        result.append((words[:-1], words[-1]))
    return result


def install_arguments(parser: DockerfileParser) -> list[str]:
    """The arguments that the image's RUN passes to the install script (up to its `&&`)."""
    runs = [v for v in instructions(parser, "RUN") if INSTALL_SCRIPT in v]
    assert len(runs) == 1, f"expected one RUN of {INSTALL_SCRIPT}, found {runs}"
    words = shlex.split(runs[0].replace("\\\n", " "))
    start = words.index(INSTALL_SCRIPT) + 1
    end = words.index("&&", start) if "&&" in words[start:] else len(words)
    return words[start:end]


def replay_copies(target: Path, root: Path = ROOT, parser: DockerfileParser | None = None) -> Path:
    """Copies what the Dockerfile's COPY instructions copy (through .dockerignore) into
    ``target``, which stands for the WORKDIR they copy into. Returns ``target``."""
    parser = parser or parse(root / "Dockerfile")
    rules = ignore_rules(root)
    for sources, destination in copies(parser):
        assert not destination.startswith("/"), f"COPY to {destination}: expected a relative path"
        for source in sources:
            assert not excluded(source, rules), f"COPY {source}: .dockerignore leaves it out"
            path = root / source
            if path.is_dir():
                for file in sorted(p for p in path.rglob("*") if p.is_file()):
                    relative = file.relative_to(root).as_posix()
                    if not excluded(relative, rules):
                        out = target / destination / file.relative_to(path)
                        out.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(file, out)
            else:
                out = target / destination
                if destination.endswith("/") or len(sources) > 1:
                    out = out / path.name
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, out)
    return target
