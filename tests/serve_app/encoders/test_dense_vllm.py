"""The vllm dense backend (vLLM on CPU, float32) against the transformers backend on a tiny
random Qwen3 with the real Qwen3 tokenizer: same tokens, same pooling, same vectors."""

import numpy as np
import pytest

from serve_app.config import DenseConfig
from serve_app.errors import ConfigError
from tests.conftest import require_vllm

pytestmark = pytest.mark.vllm
require_vllm()

TASK = "Given a claim, retrieve abstracts that support or refute it"
DOCUMENTS = [
    "Aspirin reduces the risk of heart attack in adults with prior cardiovascular events.",
    "short",
    "Mitochondria produce ATP through oxidative phosphorylation. " * 12,  # truncated
    "0-dimensional biomaterials show inductive properties.",
]
QUERIES = ["aspirin heart attack", "what makes ATP", "biomaterials"]


def qwen3_config(model_dir, **overrides) -> DenseConfig:
    base = {
        "model": str(model_dir),
        "pooling": "last_token",
        "append_token": "<|endoftext|>",
        "query_instruction": TASK,
        "max_length": 64,
        "dtype": "float32",
        "vllm": {"enforce_eager": True, "max_model_len": 128},
    }
    return DenseConfig(**{**base, **overrides})


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def vllm_encoder(tiny_qwen3_dir):
    from serve_app.encoders.dense_vllm import VllmDenseEncoder

    encoder = VllmDenseEncoder(qwen3_config(tiny_qwen3_dir, backend="vllm", output_dim=None))
    yield encoder
    encoder.close()


@pytest.fixture(scope="module")
def reference(tiny_qwen3_dir):
    from serve_app.encoders.dense_transformers import TransformersDenseEncoder

    return TransformersDenseEncoder(qwen3_config(tiny_qwen3_dir))


def test_protocol_and_shape(vllm_encoder):
    from serve_app.encoders.base import LaneDenseEncoder

    assert isinstance(vllm_encoder, LaneDenseEncoder)
    assert vllm_encoder.dim == 64
    vectors = vllm_encoder.encode(DOCUMENTS)
    assert vectors.shape == (4, 64) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_documents_agree_with_transformers(vllm_encoder, reference):
    assert cosines(vllm_encoder.encode(DOCUMENTS), reference.encode(DOCUMENTS)).min() >= 0.9999


async def test_instructed_queries_agree_with_transformers(vllm_encoder, reference):
    served = await vllm_encoder.embed_queries(QUERIES)
    assert cosines(served, reference.encode_queries_sync(QUERIES)).min() >= 0.9999
    # the instruction is really there: a query is not embedded like the same text as a document
    as_documents = await vllm_encoder.embed_documents(QUERIES)
    assert cosines(served, as_documents).max() < 0.9999


def test_pools_the_appended_end_of_text_token(vllm_encoder, tiny_qwen3_dir):
    """Independent of our own code: last hidden state of <|endoftext|>, L2-normalised."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen3_dir))
    model = AutoModel.from_pretrained(str(tiny_qwen3_dir)).eval()
    ids = tokenizer(DOCUMENTS[0])["input_ids"] + [tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1].numpy()
    assert cosines(vllm_encoder.encode(DOCUMENTS[:1]), hidden[None, :])[0] >= 0.9999


async def test_stats_and_empty(vllm_encoder):
    vectors, stats = await vllm_encoder.embed_formatted(DOCUMENTS)
    assert vectors.shape == (4, 64) and stats["batch_size"] == 4 and stats["tokens"] > 4
    assert (await vllm_encoder.embed_documents([])).shape == (0, 64)


def test_validate_no_load_reads_the_dimension_vllm_serves(vllm_encoder, tiny_qwen3_dir):
    """`serve-app validate --no-load` takes the dense dimension from config.json without
    loading: for the vllm backend it equals the running engine's (and with output_dim)."""
    from serve_app.config import AppConfig
    from serve_app.preflight import config_dense_dim

    for output_dim in (None, 32):
        dense = qwen3_config(tiny_qwen3_dir, backend="vllm", output_dim=output_dim)
        expected = vllm_encoder.model_dim if output_dim is None else output_dim
        # Chunks within the tiny model's max_length (AppConfig refuses longer ones).
        chunker = {"max_tokens": dense.max_length, "overlap_tokens": 8}
        config = AppConfig(dense=dense, chunker=chunker)
        assert config_dense_dim(config, tiny_qwen3_dir) == expected
    assert vllm_encoder.model_dim == vllm_encoder.dim == 64


def test_installed_build_must_match_the_configured_device(monkeypatch, tiny_qwen3_dir):
    """device: cpu with a CUDA build of vLLM is refused too (no silent choice either way)."""
    from vllm.platforms import current_platform

    from serve_app.encoders.dense_vllm import VllmDenseEncoder

    monkeypatch.setattr(type(current_platform), "device_type", "cuda", raising=False)
    with pytest.raises(ConfigError, match=r"installed vLLM build runs on 'cuda'.*dense.device"):
        VllmDenseEncoder(qwen3_config(tiny_qwen3_dir, backend="vllm"))
