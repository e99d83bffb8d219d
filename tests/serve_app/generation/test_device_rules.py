"""The LLM backends' device rule: a GPU asked for where there is none fails at start, naming
the setting, before any model is loaded."""

import pytest

from serve_app.config import LlmConfig
from serve_app.errors import ConfigError
from serve_app.generation import build_llm
from tests.support.data import SMOLLM2


def test_a_gpu_device_is_refused_with_the_switch_named():
    with pytest.raises(ConfigError, match=r"llm.device is 'cuda'.*llm.device: cpu"):
        build_llm(LlmConfig(**{**SMOLLM2, "device": "cuda"}))


def test_vllm_backend_refuses_cuda_without_a_gpu_before_loading_anything():
    with pytest.raises(ConfigError, match=r"llm.device is 'cuda' but no CUDA GPU"):
        build_llm(
            LlmConfig(**{**SMOLLM2, "backend": "vllm", "model": "/models/x", "device": "cuda"})
        )
