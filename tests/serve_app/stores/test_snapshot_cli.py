"""Snapshots through the CLI on the server topologies."""

from __future__ import annotations


def test_snapshot_cli_reports_what_the_test_servers_lack(tmp_path, opensearch_url, capsys):
    """The success path needs a Qdrant server and an OpenSearch snapshot repository, neither of
    which runs here (qdrant-client local mode and osmem-server have no snapshot API): this
    checks the CLI wiring and that each refusal is a clear error, not a crash."""
    import yaml

    from serve_app.cli import main

    def run(*args: str, **stores) -> int:
        config = {
            "data_dir": str(tmp_path),
            "stores": {
                "topology": "opensearch+qdrant",
                "opensearch": {"hosts": [opensearch_url], "index": "snap", **stores},
                "qdrant": {"local_path": "q", "collection": "snap"},
            },
        }
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        return main(["--config", str(path), "snapshot", *args])

    assert run("list") == 2
    assert "snapshot_repository is not set" in capsys.readouterr().err
    assert run("create", "--name", "s1", snapshot_repository="backups") == 2
    assert "OpenSearch refused snapshot creation" in capsys.readouterr().err

    embedded = tmp_path / "embedded.yaml"
    embedded.write_text(yaml.safe_dump({"data_dir": str(tmp_path)}))
    assert main(["--config", str(embedded), "snapshot", "list"]) == 2
    assert "no snapshot API" in capsys.readouterr().err
