"""Dense embeddings with transformers: mean, CLS or last-token pooling; L2-normalised."""

from __future__ import annotations

import asyncio

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

from serve_app.config import DenseConfig, resolve_model_path
from serve_app.encoders.base import DENSE_BACKENDS
from serve_app.encoders.batching import padding_ratio, token_budget_batches
from serve_app.encoders.torch_runtime import ModelLock, resolve_device, resolve_dtype


class TransformersDenseEncoder:
    """A transformers encoder with the pooling of its model family.

    - ``mean``: mean of token states over non-padding tokens (sentence-transformers MiniLM).
    - ``cls``: the first token's state (BGE).
    - ``last_token``: the state of the last real token, after appending ``append_token``
      (Qwen3-Embedding appends ``<|endoftext|>``); queries are wrapped in
      ``query_template`` when ``query_instruction`` is set, documents never are.
    Inputs are truncated to ``max_length`` tokens including special and appended tokens,
    batched by token budget (longest first) and returned in input order.
    """

    def __init__(self, config: DenseConfig) -> None:
        self.config = config
        self.model_id = config.model
        path = resolve_model_path(config.model)
        self.device = resolve_device(config.device, "dense.device")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path, dtype=resolve_dtype(config.dtype))
        self.model.to(self.device).eval()
        self.dim = int(self.model.config.hidden_size)
        self._append_id: int | None = None
        if config.append_token is not None:
            token_id = self.tokenizer.convert_tokens_to_ids(config.append_token)
            if token_id is None or token_id == self.tokenizer.unk_token_id:
                raise ValueError(
                    f"dense.append_token {config.append_token!r} is not in the vocabulary"
                )
            self._append_id = int(token_id)
        pad = self.tokenizer.pad_token_id
        self._pad_id = int(pad if pad is not None else (self._append_id or 0))
        self._lock = ModelLock()
        if config.num_threads:
            torch.set_num_threads(config.num_threads)

    def format_query(self, query: str) -> str:
        if self.config.query_instruction:
            return self.config.query_template.format(
                task=self.config.query_instruction, query=query
            )
        return query

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        room = self.config.max_length - (1 if self._append_id is not None else 0)
        encoded = self.tokenizer(texts, add_special_tokens=True, truncation=True, max_length=room)[
            "input_ids"
        ]
        if self._append_id is not None:
            encoded = [[*ids, self._append_id] for ids in encoded]
        return encoded

    def encode(self, texts: list[str]) -> np.ndarray:
        """Blocking encode of already-formatted texts."""
        return self.encode_with_stats(texts)[0]

    @torch.inference_mode()
    def encode_with_stats(self, texts: list[str]) -> tuple[np.ndarray, dict]:
        """Vectors plus batching stats (texts, model batches, padding ratio)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32), {"batch_size": 0}
        ids = self._token_ids(texts)
        lengths = [len(x) for x in ids]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        batches = token_budget_batches(
            lengths, self.config.max_batch_tokens, self.config.batch_size
        )
        with self._lock:
            for batch in batches:
                width = max(lengths[i] for i in batch)
                input_ids = torch.full((len(batch), width), self._pad_id, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for row, index in enumerate(batch):
                    input_ids[row, : lengths[index]] = torch.tensor(ids[index])
                    mask[row, : lengths[index]] = 1
                hidden = self.model(
                    input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device)
                ).last_hidden_state.float()
                pooled = self._pool(hidden, mask.to(self.device))
                if self.config.normalize:
                    pooled = torch.nn.functional.normalize(pooled, p=2, dim=-1)
                out[batch] = pooled.cpu().numpy()
        stats = {
            "batch_size": len(texts),
            "model_batches": len(batches),
            "padding_ratio": padding_ratio(lengths, batches),
        }
        return out, stats

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

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self.encode, texts)

    async def embed_queries(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self.encode_queries_sync, texts)


@DENSE_BACKENDS.register("transformers")
def _build(config: DenseConfig) -> TransformersDenseEncoder:
    return TransformersDenseEncoder(config)
