"""Models pinned to a revision and checked against the index: the model fetch records the
revision and its files' SHA-256 beside the folder (serve_app/model_manifest.py); the index
records the revision it was built with; a process that would write or serve with other weights
refuses to start with STORE_MODEL_MISMATCH naming both; ``serve-app validate`` reports it.

The Hub is the test double of tests/support/hf_hub_double.py (the network boundary); the
models are tiny real BERTs loaded by the real encoder, the index the real embedded store."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from serve_app.config import config_from_dict, resolve_model_path
from serve_app.errors import ModelMismatchError
from serve_app.model_manifest import read_manifest, sha256_file
from serve_app.pipelines.components import build_components
from tests.serve_app.test_model_fetch import WANTED, run_fetch, tiny_repo  # noqa: F401
from tests.support.hf_hub_double import HubDouble, HubRepo

REPO = "tiny-org/tiny-bert"


@pytest.fixture(scope="module")
def retrained(tiny_repo, tmp_path_factory) -> dict[str, bytes]:  # noqa: F811
    """The same repository at a later commit: the same architecture, other weights."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("retrained")
    BertModel(BertConfig.from_dict(json.loads(tiny_repo["config.json"]))).save_pretrained(folder)
    return {**tiny_repo, "model.safetensors": (folder / "model.safetensors").read_bytes()}


@pytest.fixture
def hub(tiny_repo):  # noqa: F811
    with HubDouble() as double:
        double.add(HubRepo(REPO, tiny_repo))
        yield double


def app_config(tmp_path, **dense):
    return config_from_dict(
        {
            "data_dir": str(tmp_path / "data"),
            "chunker": {"name": "sliding_window", "max_tokens": 64, "overlap_tokens": 8},
            "dense": {"model": str(tmp_path / "models" / REPO), "max_length": 128, **dense},
            "splade": {"enabled": False},
            "search": {"strategies": ["bm25", "dense"]},
        },
        "test",
    )


async def open_and_close(config) -> None:
    components = await build_components(config)
    await components.close()


def test_the_fetch_records_the_revision_and_each_files_sha256(hub, tmp_path, tiny_repo):  # noqa: F811
    done = run_fetch(hub, tmp_path, REPO)
    assert done.returncode == 0, done.stderr
    manifest = read_manifest(tmp_path / "models" / REPO)
    assert manifest["repo_id"] == REPO and manifest["revision"] == hub.repos[REPO].sha
    assert manifest["files"] == {
        name: {"size": len(tiny_repo[name]), "sha256": hashlib.sha256(tiny_repo[name]).hexdigest()}
        for name in WANTED
    }
    assert (tmp_path / "models" / "tiny-org" / "tiny-bert.manifest.json").is_file()  # beside


async def test_an_index_refuses_weights_of_another_revision(hub, tmp_path, retrained):
    """(was: accepted silently) The index is built with the weights fetched at one commit; the
    Hub moves on, the cache is fetched again at the same path: opening the index with the new
    weights is refused, naming the recorded and the configured revision."""
    assert run_fetch(hub, tmp_path, REPO).returncode == 0
    first = hub.repos[REPO].sha
    await open_and_close(app_config(tmp_path))

    hub.add(HubRepo(REPO, retrained))
    assert run_fetch(hub, tmp_path, REPO).returncode == 0
    second = hub.repos[REPO].sha
    assert second != first
    with pytest.raises(ModelMismatchError) as refused:
        await open_and_close(app_config(tmp_path))
    assert refused.value.code == "STORE_MODEL_MISMATCH"
    assert f"dense_revision: recorded {first!r}, configured {second!r}" in refused.value.message


async def test_a_configured_revision_the_cache_does_not_hold_is_refused(hub, tmp_path):
    assert run_fetch(hub, tmp_path, REPO).returncode == 0
    other = "0" * 40
    with pytest.raises(ModelMismatchError, match=f"dense.revision is {other} but the model cache"):
        await open_and_close(app_config(tmp_path, revision=other))


async def test_a_pinned_fetch_builds_an_index_that_records_the_pin(hub, tmp_path):
    pin = hub.repos[REPO].sha
    done = run_fetch(hub, tmp_path, "--pinned", f"{REPO}@{pin}")
    assert done.returncode == 0, done.stderr
    config = app_config(tmp_path, revision=pin)
    await open_and_close(config)
    recorded = json.loads((config.data_path / "qdrant" / "index_meta.json").read_text())
    assert recorded["dense_revision"] == pin and recorded["dense_dim"] == 32


async def test_an_index_recorded_before_revisions_opens_and_then_records_the_pin(
    hub, tmp_path, caplog
):
    """(was: refused with "dense_revision: recorded None") An index_meta.json of the previous
    release records no revision: a configuration that pins one opens it with a WARNING, and the
    index records the pin from then on."""
    pin = hub.repos[REPO].sha
    assert run_fetch(hub, tmp_path, "--pinned", f"{REPO}@{pin}").returncode == 0
    config = app_config(tmp_path, revision=pin)
    await open_and_close(config)
    meta = config.data_path / "qdrant" / "index_meta.json"
    recorded = json.loads(meta.read_text())
    del recorded["dense_revision"]  # what the previous release wrote
    meta.write_text(json.dumps(recorded))

    await open_and_close(config)
    assert json.loads(meta.read_text())["dense_revision"] == pin
    assert "recorded no dense_revision" in caplog.text


def test_a_revision_on_a_hub_id_that_is_not_a_fetched_folder_is_refused():
    """(was: recorded unchecked, while the loader took whatever the HF cache's refs/main held)
    A revision is checked against the fetch manifest of a folder; on a bare Hub id there is
    none, so the revision is refused, saying how to pin it."""
    from serve_app.model_manifest import loaded_revision

    pin = "1" * 40
    with pytest.raises(ModelMismatchError) as refused:
        loaded_revision("sentence-transformers/all-MiniLM-L6-v2", pin, "dense.revision")
    assert refused.value.code == "STORE_MODEL_MISMATCH"
    assert "is a Hub id, not a fetched folder" in refused.value.message
    assert loaded_revision("sentence-transformers/all-MiniLM-L6-v2", None, "x") is None
    assert loaded_revision("/models/absent/here", pin, "dense.revision") == pin  # another machine's


def test_an_unpinned_id_is_refused_where_pins_are_required(hub, tmp_path):
    done = run_fetch(hub, tmp_path, "--pinned", REPO, f"{REPO}@main")
    assert done.returncode == 2
    assert f"{REPO} is not pinned" in done.stderr and f"{REPO}@main is not pinned" in done.stderr


class TamperedRepo(HubRepo):
    """A repository whose listed SHA-256 of its weights differs from the bytes served (a
    corrupted upload or a changed CDN object): the fetch must not accept them."""

    def lfs(self, name: str) -> dict | None:
        listed = super().lfs(name)
        return listed and {**listed, "sha256": "0" * 64}


def test_weights_that_differ_from_the_hubs_sha256_are_refused(hub, tmp_path, tiny_repo):  # noqa: F811
    hub.add(TamperedRepo(REPO, tiny_repo))
    done = run_fetch(hub, tmp_path, REPO)
    assert done.returncode == 1
    assert (
        f"model.safetensors has SHA-256 {hashlib.sha256(tiny_repo['model.safetensors']).hexdigest()}"
        in done.stderr
    )
    assert "but the Hub lists " + "0" * 64 in done.stderr
    assert not (tmp_path / "models" / REPO / "model.safetensors").exists()  # removed
    assert read_manifest(tmp_path / "models" / REPO) is None  # nothing recorded


def files_state(folder: Path) -> dict[str, tuple[str, int, int]]:
    """Each file's SHA-256, inode and mtime: a file rewritten in place changes one of them."""
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and ".cache" not in p.parts):
        stat = path.stat()
        out[str(path.relative_to(folder))] = (sha256_file(path), stat.st_ino, stat.st_mtime_ns)
    return out


async def test_an_upgrades_fetch_leaves_the_running_revision_and_a_rollback_finds_it(
    hub,
    tmp_path,
    tiny_repo,  # noqa: F811
    retrained,
):
    """(was: the fetch wrote <owner>/<name> in place, before validate and any cutover) The
    running cluster reads the first commit's folder; the upgrade's fetch of a new commit
    writes a folder of its own; the running revision's files are untouched, a replica of it
    starting then still opens the index, and the rollback's fetch finds it complete. The
    keep rule then removes the least recently fetched commit."""
    models = tmp_path / "models"
    first = hub.repos[REPO].sha
    fetch = ("--pinned", "--keep-revisions", "2")
    assert run_fetch(hub, tmp_path, *fetch, f"{REPO}@{first}").returncode == 0
    running = app_config(tmp_path, revision=first)
    await open_and_close(running)  # the running cluster's index, built on the first commit
    folder = models / f"{REPO}@{first}"
    before = files_state(folder)
    assert "model.safetensors" in before

    hub.add(HubRepo(REPO, retrained, older=(tiny_repo,)))
    second = hub.repos[REPO].sha
    done = run_fetch(hub, tmp_path, *fetch, f"{REPO}@{second}")  # the pre-upgrade fetch
    assert done.returncode == 0, done.stderr
    assert files_state(folder) == before and read_manifest(folder)["revision"] == first
    assert resolve_model_path(str(models / REPO), second) == str(models / f"{REPO}@{second}")
    await open_and_close(running)  # a replica of the running cluster (a drain, a scale-up)
    with pytest.raises(
        ModelMismatchError, match=f"dense_revision: recorded {first!r}, configured {second!r}"
    ):
        await open_and_close(app_config(tmp_path, revision=second))  # what validate refuses

    downloads = len(hub.file_requests("GET"))
    done = run_fetch(hub, tmp_path, *fetch, f"{REPO}@{first}")  # the pre-rollback fetch
    assert done.returncode == 0 and "already complete" in done.stdout, done.stdout
    assert len(hub.file_requests("GET")) == downloads and files_state(folder) == before

    config = json.loads(tiny_repo["config.json"])
    later = json.dumps({**config, "initializer_range": 0.05}).encode()
    hub.add(HubRepo(REPO, {**tiny_repo, "config.json": later}, older=(tiny_repo, retrained)))
    third = hub.repos[REPO].sha
    done = run_fetch(hub, tmp_path, *fetch, f"{REPO}@{third}")
    assert done.returncode == 0, done.stderr
    assert f"removed {models / f'{REPO}@{second}'}" in done.stdout
    assert sorted(p.name for p in (models / "tiny-org").iterdir()) == [
        f"tiny-bert@{first}",
        f"tiny-bert@{first}.manifest.json",
        f"tiny-bert@{third}",
        f"tiny-bert@{third}.manifest.json",
    ]
    assert files_state(folder) == before
