"""`serve-app answer` in process: the answer streams to stdout, its passages, sources and
timings to stderr; `--json` prints the whole answer; no LLM configured is a clear error."""

import json
from pathlib import Path

import yaml

from serve_app.cli import main
from tests.support.data import SMOLLM2

ROOT = Path(__file__).resolve().parents[2]


def config_file(tmp_path: Path, llm: dict) -> Path:
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    config["llm"] = llm
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_answer_streams_in_process_and_as_json(tmp_path, capsys):
    path = config_file(tmp_path, SMOLLM2)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "plasmids.txt").write_text(
        "Plasmids carry antibiotic resistance genes between bacteria."
    )
    (docs / "vectors.txt").write_text("Qdrant stores dense vectors for semantic search.")
    assert main(["--config", str(path), "ingest", str(docs)]) == 0
    capsys.readouterr()
    question = ["answer", "What carries resistance genes?", "--no-understand"]
    assert main(["--config", str(path), *question, "--max-tokens", "24"]) == 0
    out, err = capsys.readouterr()
    assert out.strip()
    assert "passages for: What carries resistance genes?" in err and "first token" in err
    assert main(["--config", str(path), *question, "--max-tokens", "8", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["error"] is None and body["answer"]
    assert body["results"][0]["doc_id"] == "plasmids" and body["results"][0]["passage"] == 1


def test_answer_without_an_llm_names_the_switch(tmp_path, capsys):
    path = config_file(tmp_path, {"enabled": False})
    assert main(["--config", str(path), "answer", "anything?"]) == 2
    assert "set llm.enabled" in capsys.readouterr().err


def test_an_answer_ending_in_an_error_exits_non_zero(tmp_path, capsys):
    path = config_file(tmp_path, SMOLLM2)
    config = yaml.safe_load(path.read_text())
    config.setdefault("answer", {}).setdefault("deadlines", {})["first_token_s"] = 0.001
    path.write_text(yaml.safe_dump(config))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "plasmids.txt").write_text("Plasmids carry antibiotic resistance genes.")
    assert main(["--config", str(path), "ingest", str(docs)]) == 0
    question = ["answer", "What carries resistance genes?", "--no-understand"]
    assert main(["--config", str(path), *question]) == 1
    assert "error [TIMEOUT]" in capsys.readouterr().err
    assert main(["--config", str(path), *question, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "TIMEOUT"
