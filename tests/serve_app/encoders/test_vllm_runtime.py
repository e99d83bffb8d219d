"""The fail-fast device rule for the vLLM backends; needs no vLLM model (and no vLLM) to run."""

import time

import pytest
import torch

from serve_app.config import DenseConfig, RerankerConfig
from serve_app.encoders.vllm_runtime import engine_kwargs
from serve_app.errors import ConfigError


def test_backends_are_registered():
    from serve_app.encoders.base import DENSE_BACKENDS, RERANKER_BACKENDS

    assert {"transformers", "vllm", "vllm-http"} <= set(DENSE_BACKENDS.names())
    assert {"transformers", "vllm"} <= set(RERANKER_BACKENDS.names())


# Marked `vllm` so that the vLLM run checks the rule with vLLM installed too; it needs no
# vLLM, so the main suite runs it as well.
@pytest.mark.vllm
@pytest.mark.skipif(torch.cuda.is_available(), reason="the rule applies only without a GPU")
class TestCudaWithoutGpuFailsFast:
    def test_dense(self, tiny_qwen3_dir):
        from serve_app.encoders.dense_vllm import VllmDenseEncoder

        started = time.perf_counter()
        with pytest.raises(
            ConfigError,
            match=r"dense.device is 'cuda' but no CUDA GPU is visible.*set dense.device: cpu",
        ):
            VllmDenseEncoder(DenseConfig(backend="vllm", model=str(tiny_qwen3_dir), device="cuda"))
        assert time.perf_counter() - started < 5  # before any model is loaded

    def test_reranker(self, tiny_qwen3_classifier_dir):
        from serve_app.encoders.reranker_vllm import VllmReranker

        config = RerankerConfig(
            enabled=True, backend="vllm", model=str(tiny_qwen3_classifier_dir), device="cuda:0"
        )
        with pytest.raises(ConfigError, match=r"set reranker.device: cpu"):
            VllmReranker(config)


def test_engine_budget_covers_a_whole_prompt():
    """Pooling prompts are prefilled whole, so vLLM's token budget is at least max_model_len."""
    config = DenseConfig(max_length=512, max_batch_tokens=256, batch_size=8)
    kwargs = engine_kwargs(
        config.vllm,
        model="m",
        dtype="float32",
        max_length=config.max_length,
        batch_size=config.batch_size,
        max_batch_tokens=config.max_batch_tokens,
    )
    assert kwargs["max_model_len"] == 512 and kwargs["max_num_batched_tokens"] == 512
    assert kwargs["max_num_seqs"] == 8 and kwargs["runner"] == "pooling"


def test_engine_length_must_hold_the_longest_input():
    with pytest.raises(ValueError, match=r"dense.vllm.max_model_len \(128\) is below"):
        DenseConfig(max_length=256, vllm={"max_model_len": 128})
    with pytest.raises(ValueError, match=r"reranker.vllm.max_model_len \(64\) is below"):
        RerankerConfig(max_length=512, vllm={"max_model_len": 64})
    assert DenseConfig(max_length=256, vllm={"max_model_len": 512}).vllm.max_model_len == 512
