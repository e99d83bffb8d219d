"""Dense embeddings with transformers: mean, CLS or last-token pooling; L2-normalised."""

from __future__ import annotations

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

from serve_app.config import DenseConfig, resolve_model_path
from serve_app.encoders.dense_inputs import DenseInputs, finish_vectors, output_dim
from serve_app.encoders.queue import Lane, ModelQueue
from serve_app.encoders.token_batches import (
    padded_width,
    padding_ratio,
    token_budget_batches,
)
from serve_app.encoders.torch_runtime import (
    resolve_device,
    resolve_dtype,
    start_up,
    synthetic_batch,
    to_device,
)


class TransformersDenseEncoder:
    """A transformers encoder with the pooling of its model family.

    - ``mean``: mean of token states over non-padding tokens (sentence-transformers MiniLM).
    - ``cls``: the first token's state (BGE).
    - ``last_token``: the state of the last real token, after appending ``append_token``
      (Qwen3-Embedding appends ``<|endoftext|>``); queries are wrapped in
      ``query_template`` when ``query_instruction`` is set, documents never are.
    Inputs are truncated to ``max_length`` tokens including special and appended tokens,
    batched by token budget (longest first) and returned in input order; ``output_dim``
    keeps the first dimensions (Matryoshka) before normalising. The async methods go through
    the model's queue (one worker thread, queries before documents).
    """

    def __init__(self, config: DenseConfig) -> None:
        self.config = config
        self.model_id = config.model
        path = resolve_model_path(config.model, config.revision)
        self.device = resolve_device(config.device, "dense.device")
        self.inputs = DenseInputs(config, AutoTokenizer.from_pretrained(path))
        self.tokenizer = self.inputs.tokenizer
        self.model = AutoModel.from_pretrained(path, dtype=resolve_dtype(config.dtype))
        self.model.to(self.device).eval()
        self.dim = output_dim(config, int(self.model.config.hidden_size))
        self._pad_id = self.inputs.pad_id
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        self._multiple, self.warmup = start_up("dense", config, self.device, self._run_shape)
        self.queue = ModelQueue(
            "dense",
            self._run_lane,
            config.queue.query_batch_size,
            config.queue.documents(config.batch_size),
        )

    def format_query(self, query: str) -> str:
        return self.inputs.format_query(query)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Blocking encode of already-formatted texts."""
        return self.encode_with_stats(texts)[0]

    def encode_with_stats(self, texts: list[str]) -> tuple[np.ndarray, dict]:
        """Vectors plus batching stats (texts, model batches, tokens, padding ratio)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32), {"batch_size": 0}
        ids = self.inputs.token_ids(texts)
        lengths = [len(x) for x in ids]
        batches = token_budget_batches(
            lengths, self.config.max_batch_tokens, self.config.batch_size
        )
        out = self.encode_token_ids(ids, batches)
        stats = {
            "batch_size": len(texts),
            "model_batches": len(batches),
            "tokens": sum(lengths),
            "padding_ratio": padding_ratio(lengths, batches),
        }
        return out, stats

    @torch.inference_mode()
    def encode_token_ids(self, ids: list[list[int]], batches: list[list[int]]) -> np.ndarray:
        """Blocking: vectors for token ids, run as the given batches of indices (right-padded)."""
        lengths = [len(x) for x in ids]
        out = np.zeros((len(ids), int(self.model.config.hidden_size)), dtype=np.float32)
        for batch in batches:
            width = padded_width(
                max(lengths[i] for i in batch), self._multiple, self.config.max_length
            )
            input_ids = torch.full((len(batch), width), self._pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, index in enumerate(batch):
                input_ids[row, : lengths[index]] = torch.tensor(ids[index])
                mask[row, : lengths[index]] = 1
            input_ids, mask = to_device(self.device, input_ids, mask)
            hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
            out[batch] = self._pool(hidden.float(), mask).cpu().numpy()
        return finish_vectors(out, self.dim, self.config.normalize)

    def _run_shape(self, rows: int, width: int) -> None:
        input_ids, mask = to_device(
            self.device, *synthetic_batch(rows, width, self.inputs.warmup_id, self._pad_id)
        )
        hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        self._pool(hidden.float(), mask).cpu()

    def _pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if self.config.pooling == "cls":
            return hidden[:, 0]
        if self.config.pooling == "last_token":
            last = mask.sum(dim=1) - 1  # right padding: the last real token
            return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)

    def encode_queries_sync(self, texts: list[str]) -> np.ndarray:
        return self.encode([self.format_query(t) for t in texts])

    def _run_lane(self, lane: Lane, texts: list[str]) -> tuple[np.ndarray, dict]:
        return self.encode_with_stats(
            [self.format_query(t) for t in texts] if lane == "query" else texts
        )

    async def encode_lane(self, lane: Lane, texts: list[str]) -> tuple[np.ndarray, dict]:
        """Vectors and batch statistics through the model queue (queries are formatted)."""
        vectors, stats = await self.queue.submit(lane, texts)
        return np.asarray(vectors), stats

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return (await self.encode_lane("document", texts))[0]

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        return (await self.encode_lane("query", texts))[0]

    async def check_health(self) -> None:
        self.queue.check_health()

    def close(self) -> None:
        self.queue.close()


def build(config: DenseConfig) -> TransformersDenseEncoder:
    return TransformersDenseEncoder(config)
