"""``serve-app backup`` / ``serve-app restore`` of the embedded index, end to end through the
CLI on the real engine and the real small model (config/local.yaml): a round trip gives the
same search results and document counts; a backup of an index a service holds is refused
with the ownership lock's message; a damaged backup or a restore over an index is refused
without touching the index there."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml

from serve_app.cli import main
from serve_app.stores.ownership import OWNER_URL_ENV, IndexOwnership

ROOT = Path(__file__).resolve().parents[3]
QUERIES = ["where are dense vectors stored?", "how do plasmids spread resistance?"]


@pytest.fixture
def config_file(tmp_path) -> Path:
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def ingested(config_file, tmp_path, capsys) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text("# Guide\n\n## Setup\n\nInstall the retrieval service.\n")
    (docs / "notes.txt").write_text("Qdrant stores dense vectors for semantic search.")
    (docs / "plasmids.txt").write_text("Plasmids carry resistance genes between bacteria.")
    assert run(config_file, "ingest", str(docs)) == 0
    capsys.readouterr()
    return config_file


def run(config_file: Path, *args: str) -> int:
    return main(["--config", str(config_file), *args])


def index_dir(config_file: Path) -> Path:
    return Path(yaml.safe_load(config_file.read_text())["data_dir"]) / "qdrant"


def served(config_file: Path, capsys) -> dict:
    """What the index answers: each query's ranked (doc, chunk, score), and the counts."""
    answers = []
    for query in QUERIES:
        assert run(config_file, "search", query, "--json") == 0
        results = json.loads(capsys.readouterr().out)["results"]
        answers.append([(r["doc_id"], r["chunk_id"], r["score"]) for r in results])
    assert run(config_file, "inspect", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    counts = [(c["tenant_id"], c["collection"], c["chunks"], c["documents"]) for c in report["collections"]]  # fmt: skip
    return {"answers": answers, "counts": counts}


def test_a_backup_restores_the_same_index(ingested, tmp_path, capsys):
    before = served(ingested, capsys)
    assert before["counts"] and all(answer for answer in before["answers"])
    archive = tmp_path / "backups" / "index.tar"
    assert run(ingested, "backup", str(archive)) == 0
    assert json.loads(capsys.readouterr().out)["backup"] == str(archive)

    shutil.rmtree(index_dir(ingested).parent)  # the volume is lost
    assert run(ingested, "restore", str(archive)) == 0
    capsys.readouterr()
    assert served(ingested, capsys) == before


def test_a_backup_of_an_index_in_use_is_refused_with_the_locks_message(
    ingested, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv(OWNER_URL_ENV, "http://127.0.0.1:8000")
    holder = IndexOwnership(index_dir(ingested))
    holder.acquire()  # as the service holds it
    try:
        assert run(ingested, "backup", str(tmp_path / "index.tar")) == 2
    finally:
        holder.release()
    err = capsys.readouterr().err
    assert "error [INDEX_IN_USE]" in err and "the service running at http://127.0.0.1:8000" in err
    assert "A backup needs the index closed" in err
    assert not (tmp_path / "index.tar").exists()


def test_a_damaged_backup_or_an_occupied_path_is_refused(ingested, tmp_path, capsys):
    before = served(ingested, capsys)
    archive = tmp_path / "index.tar"
    assert run(ingested, "backup", str(archive)) == 0
    capsys.readouterr()
    assert run(ingested, "restore", str(archive)) == 2
    assert "holds an index already" in capsys.readouterr().err

    damaged = tmp_path / "damaged.tar"
    with tarfile.open(archive) as source, tarfile.open(damaged, "w") as target:
        for member in source.getmembers():
            data = source.extractfile(member).read() if member.isfile() else None
            if member.name == "index_meta.json":
                data = data.replace(b'"dense_dim": 384', b'"dense_dim": 385')
                member.size = len(data)
            target.addfile(member, io.BytesIO(data) if data is not None else None)
    assert run(ingested, "restore", "--replace", str(damaged)) == 2
    assert "index_meta.json does not match its SHA-256" in capsys.readouterr().err
    assert served(ingested, capsys) == before  # the index there is untouched


def test_an_empty_or_partial_backup_is_refused_before_the_index_is_touched(
    ingested, tmp_path, capsys
):
    """(was: an archive listing no files passed, and --replace wiped the index) A backup must
    hold the index's metadata and its shard."""
    before = served(ingested, capsys)
    empty = tmp_path / "empty.tar"
    body = json.dumps({"version": 1, "models": {}, "files": {}}).encode()
    with tarfile.open(empty, "w") as archive:
        info = tarfile.TarInfo("backup.json")
        info.size = len(body)
        archive.addfile(info, io.BytesIO(body))
    assert run(ingested, "restore", "--replace", str(empty)) == 2
    assert "holds no index" in capsys.readouterr().err
    assert served(ingested, capsys) == before


def test_a_restore_that_fails_between_moves_leaves_the_old_index(
    ingested, tmp_path, capsys, monkeypatch
):
    """(was: the old index deleted first, a failure between the moves left metadata without
    a shard) The old entries are set aside, the new ones moved in with the metadata last;
    a move that fails (the test double of a crash: os.replace raising on the metadata's move)
    puts the old index back, and it opens as before."""
    from serve_app.stores import embedded_backup

    before = served(ingested, capsys)
    archive = tmp_path / "index.tar"
    assert run(ingested, "backup", str(archive)) == 0
    capsys.readouterr()
    real_replace = embedded_backup.os.replace

    def failing_replace(source, target):
        moving_in = Path(source).parent.name != embedded_backup.RESTORE_ASIDE
        if Path(target).name == "index_meta.json" and moving_in:
            raise OSError("simulated failure while moving the metadata in")
        return real_replace(source, target)

    monkeypatch.setattr(embedded_backup.os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated failure"):
        embedded_backup.restore(archive, index_dir(ingested), replace=True)
    monkeypatch.undo()
    assert served(ingested, capsys) == before
    assert not list(index_dir(ingested).glob(".restore*"))  # nothing left aside


def test_a_restore_killed_midway_is_named_not_opened_as_an_empty_index(ingested, tmp_path, capsys):
    """A kill after the old index was set aside and before the new metadata moved in leaves no
    index_meta.json: the store refuses to open (rather than start a fresh shard beside the old
    one) and a restore refuses to run over it, both naming the folder that holds the old index."""
    from serve_app.stores.embedded import META_FILE, RESTORE_ASIDE

    archive = tmp_path / "index.tar"
    assert run(ingested, "backup", str(archive)) == 0
    capsys.readouterr()
    index = index_dir(ingested)
    (index / RESTORE_ASIDE).mkdir()
    (index / META_FILE).rename(index / RESTORE_ASIDE / META_FILE)  # the state a kill leaves
    assert run(ingested, "search", "plasmids", "--json") != 0
    assert RESTORE_ASIDE in capsys.readouterr().err
    assert run(ingested, "restore", "--replace", str(archive)) == 2
    assert "an interrupted restore set aside" in capsys.readouterr().err


def _bomb(path: Path, listed_size: int, size: int) -> None:
    """A gzip backup whose shard file expands to ``size`` zero bytes (a few hundred KB
    compressed) while its listing says ``listed_size``."""
    import gzip

    body = json.dumps(
        {"version": 1, "models": {}, "files": {
            "index_meta.json": {"size": 2, "sha256": "0" * 64},
            "shard/segment": {"size": listed_size, "sha256": "0" * 64},
        }}
    ).encode()  # fmt: skip

    class Zeros(io.RawIOBase):
        def __init__(self, left: int) -> None:
            self.left = left

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            n = min(len(buffer), self.left)
            buffer[:n] = bytes(n)
            self.left -= n
            return n

    with gzip.open(path, "wb", compresslevel=1) as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in (("index_meta.json", b"{}"), ("backup.json", body)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("shard/segment")
        info.size = size
        tar.addfile(info, io.BufferedReader(Zeros(size)))


@pytest.mark.parametrize("listed", ["a lie", "the truth"])
def test_a_tar_bomb_is_refused_before_a_byte_is_written(
    ingested, tmp_path, capsys, monkeypatch, listed
):
    """(was: a gzip backup expanding to gigabytes was extracted whole, filling the data
    volume, before its checksums refused it) Sizes are checked against the listing and the
    free space before anything is extracted."""
    size = 64 * 1024 * 1024
    bomb = tmp_path / "bomb.tar.gz"
    _bomb(bomb, 10 if listed == "a lie" else size, size)
    assert bomb.stat().st_size < size // 100
    before = served(ingested, capsys)
    free = shutil.disk_usage(tmp_path).free
    if listed == "the truth":  # a volume with less free space than the backup needs
        monkeypatch.setattr(
            shutil,
            "disk_usage",
            lambda p: shutil._ntuple_diskusage(free, free - size // 2, size // 2),
        )

    def never(*args, **kwargs):
        raise AssertionError("extracted before the sizes were checked")

    monkeypatch.setattr(tarfile.TarFile, "extractall", never)
    assert run(ingested, "restore", "--replace", str(bomb)) == 2
    why = capsys.readouterr().err
    if listed == "a lie":
        assert "shard/segment (67108864 bytes) is not in its backup.json" in why, why
    else:
        assert "unpacks to 67108866 bytes" in why, why
    monkeypatch.undo()
    assert served(ingested, capsys) == before
