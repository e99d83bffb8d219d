"""``serve-app validate``: passes on every topology with an index built by this configuration,
and catches each mis-wiring with a message naming the field: wrong tokenizer, wrong dimension,
a missing GPU for a ``cuda`` device, an unreachable store, another model binding, a missing
payload index (and a missing index, an unset credentials variable). Real models, real stores
(qdrant-edge, qdrant-client local mode, osmem-server)."""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from pathlib import Path

import pytest
import yaml
from opensearchpy import OpenSearch
from test_cli_inspect import topology_config

from serve_app.cli import main
from serve_app.config import load_config
from serve_app.pipelines.components import index_models
from serve_app.stores import opensearch_bodies as bodies
from serve_app.stores.base import TOPOLOGIES

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
    def make(topology: str) -> Path:
        url = request.getfixturevalue("opensearch_url") if "opensearch" in topology else None
        return topology_config(tmp_path, topology, url)

    return make


@pytest.mark.parametrize("topology", TOPOLOGIES_)
def test_a_wired_deployment_passes(topology, store_config, capsys):
    path = store_config(topology)
    build_index(path)
    code, checks = validate(path, capsys)
    assert code == 0, [c for c in checks if not c["ok"]]
    names = {c["name"] for c in checks}
    assert {"device", "tokenizer", "model", "store", "dimension", "binding"} <= names
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
