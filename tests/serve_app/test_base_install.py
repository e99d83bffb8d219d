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

SCRIPT = """
import importlib.abc, sys

class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} is an extra, not in the base install")
        return None

sys.meta_path.insert(0, Blocked())
from deployments.cli import main
config, docs = sys.argv[1:3]
assert main(["--config", config, "ingest", docs]) == 0
assert main(["--config", config, "search", "dense vectors", "--json"]) == 0
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {blocked!r})
print("LOADED", loaded)
"""


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
    assert response["results"][0]["chunk"]["doc_id"].startswith("notes")
