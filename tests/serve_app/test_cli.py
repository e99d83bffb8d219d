"""The CLI end to end on real files: clear errors for bad input, nothing half-written."""

import json
from pathlib import Path

import pytest
import yaml

from serve_app.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def config_file(tmp_path) -> Path:
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def docs(tmp_path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_text("# Guide\n\n## Setup\n\nInstall the retrieval service.\n")
    (folder / "notes.txt").write_text("Qdrant stores dense vectors for semantic search.")
    return folder


def run(config_file: Path, *args: str) -> int:
    return main(["--config", str(config_file), *args])


def test_ingest_search_and_reingest(config_file, docs, capsys):
    assert run(config_file, "ingest", str(docs)) == 0
    assert "2 written" in capsys.readouterr().out
    assert run(config_file, "ingest", str(docs)) == 0
    out = capsys.readouterr().out
    assert "0 written, 2 unchanged" in out and "chunks in index for tenant 'default': 2" in out
    assert run(config_file, "search", "where are dense vectors stored?", "--json") == 0
    response = json.loads(capsys.readouterr().out)
    assert response["results"][0]["doc_id"] == "notes"
    assert run(config_file, "search", "install", "--top-k", "1") == 0
    assert "guide" in capsys.readouterr().out


def test_malformed_file_fails_the_whole_ingest(config_file, docs, capsys):
    (docs / "broken.xml").write_text('<?xml version="1.0"?><article><front>')
    assert run(config_file, "ingest", str(docs)) == 2
    err = capsys.readouterr().err
    assert "nothing was ingested" in err and "broken.xml" in err and "malformed XML" in err
    assert run(config_file, "ingest", str(docs / "notes.txt")) == 0
    assert "chunks in index for tenant 'default': 1" in capsys.readouterr().out


def test_unsupported_format_is_named(config_file, tmp_path, capsys):
    path = tmp_path / "report.docx"
    path.write_bytes(b"PK\x03\x04 not really")
    assert run(config_file, "ingest", str(path)) == 2
    assert "unsupported format" in capsys.readouterr().err


def test_oversized_document_is_refused(config_file, docs, capsys):
    config = yaml.safe_load(config_file.read_text())
    config["limits"]["max_document_chars"] = 20
    config_file.write_text(yaml.safe_dump(config))
    assert run(config_file, "ingest", str(docs)) == 2
    assert "max_document_chars" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args,message",
    [
        (["search", "   "], "query must not be empty"),
        (["search", "x", "--strategies", "bm25,colbert"], "colbert"),
    ],
)
def test_bad_search_requests(config_file, capsys, args, message):
    assert run(config_file, *args) == 2
    err = capsys.readouterr().err
    assert "INVALID_INPUT" in err and message in err


def test_invalid_config_names_the_field(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("dense:\n  pooling: max\n")
    assert main(["--config", str(path), "search", "x"]) == 2
    assert "dense.pooling" in capsys.readouterr().err


def test_the_cli_offers_the_apis_collection_and_document_operations(config_file, docs, capsys):
    """What the HTTP API does to collections and documents, the CLI does too (in process
    here; with --url through a running service)."""
    assert run(config_file, "ingest", str(docs), "--collection", "papers") == 2
    assert "collection 'papers' not found" in capsys.readouterr().err
    assert run(config_file, "collections", "create", "papers") == 0
    assert json.loads(capsys.readouterr().out)["name"] == "papers"
    assert run(config_file, "ingest", str(docs), "--collection", "papers") == 0
    assert "2 written" in capsys.readouterr().out
    assert run(config_file, "collections", "list") == 0
    names = [c["name"] for c in json.loads(capsys.readouterr().out)["collections"]]
    assert names == ["default", "papers"]
    assert run(config_file, "search", "dense vectors", "--collection", "papers", "--json") == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["doc_id"] in {
        "notes",
        "guide",
    }
    assert run(config_file, "search", "dense vectors", "--json") == 0
    assert json.loads(capsys.readouterr().out)["results"] == []  # the default one is empty
    assert run(config_file, "documents", "get", "notes", "--collection", "papers") == 0
    assert json.loads(capsys.readouterr().out)["collection"] == "papers"
    assert run(config_file, "documents", "list", "--collection", "papers", "--limit", "1") == 0
    first = json.loads(capsys.readouterr().out)
    assert len(first["documents"]) == 1 and first["next_cursor"]
    cursor = first["next_cursor"]
    assert run(config_file, "documents", "list", "--collection", "papers", "--cursor", cursor) == 0
    rest = json.loads(capsys.readouterr().out)["documents"]
    assert sorted(d["id"] for d in [*first["documents"], *rest]) == ["guide", "notes"]
    assert run(config_file, "documents", "list", "--cursor", "../../x") == 2
    assert "cursor is not a next_cursor" in capsys.readouterr().err
    assert run(config_file, "documents", "get", "--collection", "papers") == 2
    assert "needs a document id" in capsys.readouterr().err
    assert run(config_file, "documents", "delete", "notes", "--collection", "papers") == 0
    assert json.loads(capsys.readouterr().out)["deleted"] == "notes"
    assert run(config_file, "documents", "get", "notes", "--collection", "papers") == 2
    assert "not found" in capsys.readouterr().err
    assert run(config_file, "collections", "delete", "papers") == 0
    assert json.loads(capsys.readouterr().out)["deleted"] == "papers"
    # In process as over HTTP (one service): a search of a collection the tenant lacks is
    # NOT_FOUND, never an empty result (before: the CLI searched it and printed nothing).
    assert run(config_file, "search", "dense vectors", "--collection", "papers") == 2
    assert "error [NOT_FOUND]: collection 'papers' not found" in capsys.readouterr().err


def test_terminal_escapes_in_a_title_or_filename_do_not_reach_the_terminal(
    config_file, tmp_path, capsys
):
    """A document's heading and a file's name are the uploader's text: written raw, an
    escape sequence could clear the screen or rewrite what the operator reads."""
    folder = tmp_path / "hostile"
    folder.mkdir()
    escape = "\x1b]0;owned\x07\x1b[2J"
    (folder / "plain.md").write_text(f"# Setup {escape}\n\nInstall the retrieval service.\n")
    (folder / f"bad{escape}.docx").write_bytes(b"PK\x03\x04")
    assert run(config_file, "ingest", str(folder), "--skip-invalid") == 0
    assert run(config_file, "search", "install the retrieval service", "--top-k", "1") == 0
    captured = capsys.readouterr()
    for text in (captured.out, captured.err):
        assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b[2J" in captured.out + captured.err  # shown, not obeyed
