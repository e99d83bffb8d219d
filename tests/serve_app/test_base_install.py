"""The base install (no extras) runs the embedded topology: the CLI ingests and searches in
a fresh interpreter where the extras' packages cannot be imported. (A clean-venv
`pip install .` check of the same path is quoted in README; this keeps it from regressing.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = (
    "ray",
    "fastapi",
    "starlette",
    "qdrant_client",
    "opensearchpy",
    "jwt",
    "prometheus_client",
)

BLOCK_EXTRAS = """
import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} is an extra, not in the base install")
        return None

sys.meta_path.insert(0, Blocked())
"""

SCRIPT = (
    BLOCK_EXTRAS
    + """
from deployments.cli import main
config, docs = sys.argv[1:3]
assert main(["--config", config, "ingest", docs]) == 0
assert main(["--config", config, "search", "dense vectors", "--json"]) == 0
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {blocked!r})
print("LOADED", loaded)
"""
)


def test_cli_runs_the_embedded_topology_without_extras(tmp_path):
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.txt").write_text("Qdrant stores dense vectors for semantic search.")
    (docs / "guide.md").write_text("# Guide\n\n## Setup\n\nInstall the retrieval service.\n")

    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(blocked=set(EXTRAS)), str(config_path), str(docs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "LOADED []" in out
    response = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert response["results"][0]["doc_id"].startswith("notes")


# Each command on the base install: one that needs an extra is refused before it does
# anything, naming the extra; the others run.
COMMANDS_SCRIPT = (
    BLOCK_EXTRAS
    + """
import contextlib, io, json
from deployments.cli import main
config = sys.argv[1]
out = {{}}
for argv in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["--config", config, *argv])
    out[" ".join(argv)] = [code, err.getvalue()]
print("RESULT", json.dumps(out))
"""
)

NEEDS_AN_EXTRA = {
    ("serve", "--port", "1"): "serve",
    ("eval", "--beir", "{beir}", "--max-queries", "2"): "bench",
    ("tune", "--beir", "{beir}", "--grid", "smoke"): "bench",
    ("mcp",): "mcp",
    ("mcp", "--url", "http://127.0.0.1:9"): "mcp",  # its --url is the service it serves
    ("cluster", "status"): "k8s",
    ("answer", "why?"): "llm",
}
RUNS = [("collections", "list"), ("inspect", "--json"), ("documents", "get", "nothing")]
# With --url a command needs only the client: no refusal for the llm extra, the service is
# called (nothing listens on port 9 here).
THROUGH = [("answer", "why?", "--url", "http://127.0.0.1:9")]


def test_every_command_runs_or_names_its_extra_before_working(tmp_path):
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    beir = tmp_path / "beir"  # never read: the refusal comes first
    argvs = [
        [part.format(beir=beir) for part in argv] for argv in [*NEEDS_AN_EXTRA, *RUNS, *THROUGH]
    ]
    blocked = set(EXTRAS) | {"ir_measures", "mcp", "kubernetes", "xllamacpp", "psutil"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            COMMANDS_SCRIPT.format(blocked=blocked),
            str(config_path),
            json.dumps(argvs),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    results = json.loads(line.removeprefix("RESULT "))

    for argv, extra in NEEDS_AN_EXTRA.items():
        code, stderr = results[" ".join(argv).format(beir=beir)]
        assert code == 2, (argv, stderr)
        assert "MISSING_EXTRA" in stderr, (argv, stderr)
        assert f"pip install 'serve-app[{extra}" in stderr, (argv, stderr)
    for argv in RUNS:  # they reach the (empty) store: no index yet, said as such
        code, stderr = results[" ".join(argv)]
        assert code == 2 and "NOT_FOUND" in stderr and "embedded index" in stderr, (argv, stderr)
    for argv in THROUGH:
        code, stderr = results[" ".join(argv)]
        assert code == 2 and "SERVICE_UNAVAILABLE" in stderr, (argv, stderr)
    # eval and tune were refused before they indexed or cached anything
    assert not (tmp_path / "data" / "eval").exists()
    assert not (tmp_path / "data" / "tune").exists()
