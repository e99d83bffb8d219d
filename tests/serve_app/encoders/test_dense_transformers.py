import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from serve_app.config import DenseConfig, QueueConfig, resolve_model_path
from serve_app.encoders.base import DenseEncoder
from serve_app.encoders.dense_transformers import TransformersDenseEncoder
from serve_app.errors import ConfigError

REFERENCE = json.loads((Path(__file__).parents[2] / "data" / "reference_vectors.json").read_text())


def cosine(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


class TestMiniLM:
    def test_protocol_and_shape(self, minilm):
        assert isinstance(minilm, DenseEncoder)
        vectors = minilm.encode(["a", "b c d"])
        assert vectors.shape == (2, 384) and vectors.dtype == np.float32
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)

    def test_matches_reference_vectors(self, minilm):
        docs = minilm.encode(REFERENCE["texts"])
        for row, expected in zip(docs, REFERENCE["dense_documents"], strict=True):
            assert cosine(row, expected) >= 0.9999

    def test_matches_independent_mean_pooling(self, minilm, local_config):
        path = resolve_model_path(local_config.dense.model)
        tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path)
        text = REFERENCE["texts"][1]
        with torch.no_grad():
            features = tokenizer([text], return_tensors="pt")
            hidden = model(**features).last_hidden_state[0]
        expected = hidden.mean(dim=0).numpy()
        assert cosine(minilm.encode([text])[0], expected) >= 0.9999

    def test_semantics(self, minilm):
        query = minilm.encode_queries_sync([REFERENCE["query"]])[0]
        docs = minilm.encode(REFERENCE["texts"])
        assert cosine(query, docs[1]) > cosine(query, docs[0])

    def test_batch_invariance(self, minilm):
        short = "protein folding"
        alone = minilm.encode([short])[0]
        padded = minilm.encode([short, "a much longer text " * 30])[0]
        assert cosine(alone, padded) >= 0.9999

    def test_truncation_to_max_length(self, minilm):
        assert minilm.encode(["word " * 5000]).shape == (1, 384)

    async def test_async_api_and_empty(self, minilm):
        assert (await minilm.embed_documents([])).shape == (0, 384)
        assert (await minilm.embed_queries(["x"])).shape == (1, 384)

    @pytest.mark.parametrize(
        ("queue", "lane_call"), [(QueueConfig(), 20), (QueueConfig(document_batch_size=8), 8)]
    )
    async def test_document_lane_runs_the_models_batch_unless_told(
        self, local_config, queue, lane_call
    ):
        encoder = TransformersDenseEncoder(
            local_config.dense.model_copy(update={"batch_size": 20, "queue": queue})
        )
        try:
            vectors, stats = await encoder.encode_lane("document", [f"text {i}" for i in range(50)])
        finally:
            encoder.close()
        assert vectors.shape == (50, 384)
        assert stats["batch_size"] == lane_call  # the first lane call of the request


class TestQwen3LastToken:
    @pytest.fixture(scope="class")
    def qwen(self, tiny_qwen3_dir):
        return TransformersDenseEncoder(
            DenseConfig(
                model=str(tiny_qwen3_dir),
                pooling="last_token",
                append_token="<|endoftext|>",
                query_instruction="Given a claim, retrieve abstracts that support or refute it",
                max_length=64,
            )
        )

    def test_pools_the_appended_end_of_text_token(self, qwen, tiny_qwen3_dir):
        tokenizer = AutoTokenizer.from_pretrained(str(tiny_qwen3_dir))
        model = AutoModel.from_pretrained(str(tiny_qwen3_dir)).eval()
        text = "Aspirin reduces the risk of heart attack."
        ids = tokenizer(text)["input_ids"] + [tokenizer.convert_tokens_to_ids("<|endoftext|>")]
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1].numpy()
        expected = hidden / np.linalg.norm(hidden)
        assert cosine(qwen.encode([text])[0], expected) >= 0.9999

    def test_query_instruction_template(self, qwen):
        formatted = qwen.format_query("aspirin heart")
        assert formatted == (
            "Instruct: Given a claim, retrieve abstracts that support or refute it\nQuery: aspirin heart"
        )
        as_query = qwen.encode_queries_sync(["aspirin heart"])[0]
        as_document = qwen.encode(["aspirin heart"])[0]
        assert cosine(as_query, qwen.encode([formatted])[0]) >= 0.9999
        assert cosine(as_query, as_document) < 0.9999

    def test_batch_invariance_with_right_padding(self, qwen):
        alone = qwen.encode(["short"])[0]
        batched = qwen.encode(["short", "a far longer input " * 10])[0]
        assert cosine(alone, batched) >= 0.9999

    def test_truncation_keeps_room_for_the_appended_token(self, qwen):
        ids = qwen.inputs.token_ids(["word " * 500])[0]
        assert len(ids) == 64 and ids[-1] == qwen.inputs.append_id

    def test_unknown_append_token(self, tiny_qwen3_dir):
        with pytest.raises(ValueError, match="append_token"):
            TransformersDenseEncoder(
                DenseConfig(model=str(tiny_qwen3_dir), pooling="last_token", append_token="<nope>")
            )


def test_cuda_without_gpu_fails_fast(local_config):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the fail-fast path only applies without one")
    with pytest.raises(ConfigError, match=r"dense.device is 'cuda'.*set dense.device: cpu"):
        TransformersDenseEncoder(local_config.dense.model_copy(update={"device": "cuda"}))
