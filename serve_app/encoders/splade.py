"""SPLADE sparse encoder: log1p(relu(logits)) max-pooled over real tokens, then pruned."""

from __future__ import annotations

import asyncio

import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from serve_app.config import SpladeConfig, resolve_model_path
from serve_app.encoders.batching import padding_ratio, token_budget_batches
from serve_app.encoders.torch_runtime import ModelLock, resolve_device, resolve_dtype
from serve_app.schemas import SparseVector


class SpladeEncoder:
    """SPLADE for documents and queries (same model; queries pruned harder).

    Max-pooling the masked logits before ``log1p(relu(.))`` equals pooling after it (the
    activation is monotonic) and touches the vocabulary-sized tensor once. Pruning keeps the
    ``top_k`` largest weights above ``min_weight``, on the device, before anything is copied.
    Term strings come with every vector (OpenSearch stores SPLADE as ``rank_features``).
    """

    def __init__(self, config: SpladeConfig) -> None:
        self.config = config
        self.model_id = config.model
        path = resolve_model_path(config.model)
        self.device = resolve_device(config.device, "splade.device")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForMaskedLM.from_pretrained(path, dtype=resolve_dtype(config.dtype))
        self.model.to(self.device).eval()
        self._vocab = self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer))))
        self._pad_id = int(self.tokenizer.pad_token_id or 0)
        self._lock = ModelLock()

    def encode(self, texts: list[str], top_k: int) -> list[SparseVector]:
        """Blocking encode; vectors in input order."""
        return self.encode_with_stats(texts, top_k)[0]

    @torch.inference_mode()
    def encode_with_stats(self, texts: list[str], top_k: int) -> tuple[list[SparseVector], dict]:
        """Vectors plus batching stats (texts, model batches, padding ratio)."""
        if not texts:
            return [], {"batch_size": 0}
        ids = self.tokenizer(
            texts, add_special_tokens=True, truncation=True, max_length=self.config.max_length
        )["input_ids"]
        lengths = [len(x) for x in ids]
        out: list[SparseVector | None] = [None] * len(texts)
        batches = token_budget_batches(
            lengths, self.config.max_batch_tokens, self.config.batch_size
        )
        with self._lock:
            for batch in batches:
                width = max(lengths[i] for i in batch)
                input_ids = torch.full((len(batch), width), self._pad_id, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.bool)
                for row, index in enumerate(batch):
                    input_ids[row, : lengths[index]] = torch.tensor(ids[index])
                    mask[row, : lengths[index]] = True
                input_ids, mask = input_ids.to(self.device), mask.to(self.device)
                logits = self.model(input_ids=input_ids, attention_mask=mask.long()).logits
                logits = logits.masked_fill(~mask.unsqueeze(-1), float("-inf"))
                weights = torch.log1p(torch.relu(logits.max(dim=1).values)).float()
                k = min(top_k, weights.shape[1])
                values, indices = torch.topk(weights, k, dim=1)
                keep = values > self.config.min_weight
                values, indices, keep = values.cpu(), indices.cpu(), keep.cpu()
                for row, index in enumerate(batch):
                    row_idx = indices[row][keep[row]].tolist()
                    out[index] = SparseVector(
                        indices=row_idx,
                        values=values[row][keep[row]].tolist(),
                        terms=[self._vocab[i] for i in row_idx],
                    )
        stats = {
            "batch_size": len(texts),
            "model_batches": len(batches),
            "tokens": sum(lengths),
            "padding_ratio": padding_ratio(lengths, batches),
        }
        return [v for v in out if v is not None], stats

    async def encode_documents(self, texts: list[str]) -> list[SparseVector]:
        return await asyncio.to_thread(self.encode, texts, self.config.doc_top_k)

    async def encode_queries(self, texts: list[str]) -> list[SparseVector]:
        return await asyncio.to_thread(self.encode, texts, self.config.query_top_k)
