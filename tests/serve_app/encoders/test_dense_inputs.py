import numpy as np
import pytest
from transformers import AutoTokenizer

from serve_app.config import DenseConfig
from serve_app.encoders.dense_inputs import DenseInputs, finish_vectors, output_dim
from serve_app.encoders.dense_transformers import TransformersDenseEncoder
from serve_app.errors import ConfigError

TASK = "Given a claim, retrieve abstracts that support or refute it"


@pytest.fixture(scope="module")
def qwen3_config(tiny_qwen3_dir) -> DenseConfig:
    return DenseConfig(
        model=str(tiny_qwen3_dir),
        pooling="last_token",
        append_token="<|endoftext|>",
        query_instruction=TASK,
        max_length=16,
    )


class TestDenseInputs:
    def test_query_template_and_plain_documents(self, qwen3_config):
        inputs = DenseInputs(qwen3_config)
        assert inputs.format_query("aspirin") == f"Instruct: {TASK}\nQuery: aspirin"
        plain = DenseInputs(qwen3_config.model_copy(update={"query_instruction": None}))
        assert plain.format_query("aspirin") == "aspirin"

    def test_appends_end_of_text_within_max_length(self, qwen3_config, tiny_qwen3_dir):
        inputs = DenseInputs(qwen3_config)
        eot = AutoTokenizer.from_pretrained(str(tiny_qwen3_dir)).convert_tokens_to_ids(
            "<|endoftext|>"
        )
        short, long = inputs.token_ids(["heart attack", "word " * 100])
        assert short[-1] == eot and short.count(eot) == 1
        assert len(long) == 16 and long[-1] == eot

    def test_never_doubles_a_token_the_tokenizer_already_appends(self, qwen3_config):
        """The published Qwen3-Embedding tokenizers end every input with <|endoftext|>."""
        inputs = DenseInputs(qwen3_config)
        appending = DenseInputs(qwen3_config, _AppendingTokenizer(inputs.tokenizer))
        assert appending.token_ids(["heart attack"]) == inputs.token_ids(["heart attack"])


class _AppendingTokenizer:
    """A stand-in for a tokenizer whose post-processor appends <|endoftext|> itself."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.unk_token_id = inner.unk_token_id
        self.pad_token_id = inner.pad_token_id
        self.eot = inner.convert_tokens_to_ids("<|endoftext|>")

    def convert_tokens_to_ids(self, token: str) -> int:
        return self.inner.convert_tokens_to_ids(token)

    def __call__(self, texts, add_special_tokens=True, truncation=False, max_length=None):
        many = [texts] if isinstance(texts, str) else texts
        room = None if max_length is None else max_length - 1
        ids = [[*self.inner(t)["input_ids"][:room], self.eot] for t in many]
        return {"input_ids": ids[0] if isinstance(texts, str) else ids}


class TestMatryoshka:
    def test_output_dim_must_fit_the_model(self, qwen3_config):
        assert output_dim(qwen3_config, 64) == 64
        assert output_dim(qwen3_config.model_copy(update={"output_dim": 32}), 64) == 32
        with pytest.raises(ConfigError, match=r"dense.output_dim \(128\) exceeds.*\(64\)"):
            output_dim(qwen3_config.model_copy(update={"output_dim": 128}), 64)

    def test_truncate_then_renormalise(self):
        vectors = np.array([[3.0, 4.0, 12.0], [1.0, 0.0, 5.0]])
        out = finish_vectors(vectors, 2, normalize=True)
        assert out.dtype == np.float32 and out.shape == (2, 2)
        assert np.allclose(out, [[0.6, 0.8], [1.0, 0.0]])

    def test_transformers_backend_serves_the_prefix(self, qwen3_config):
        full = TransformersDenseEncoder(qwen3_config)
        short = TransformersDenseEncoder(qwen3_config.model_copy(update={"output_dim": 32}))
        assert short.dim == 32
        a, b = full.encode(["heart attack"])[0], short.encode(["heart attack"])[0]
        assert np.allclose(b, a[:32] / np.linalg.norm(a[:32]), atol=1e-6)
