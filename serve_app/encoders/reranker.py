"""Cross-encoder reranker (BGE style): [query, passage] pairs, sigmoid of the logit."""

from __future__ import annotations

import threading

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from serve_app.config import RerankerConfig, resolve_model_path
from serve_app.encoders.queue import PairQueue
from serve_app.encoders.token_batches import filler_token_id, padding_ratio, token_budget_batches
from serve_app.encoders.torch_runtime import (
    resolve_device,
    resolve_dtype,
    start_up,
    synthetic_batch,
)


class CrossEncoderReranker:
    """Scores pairs with a sequence-classification head (one logit); passages are truncated
    first (``only_second``) so the query always survives, to ``max_length`` tokens."""

    def __init__(self, config: RerankerConfig) -> None:
        self.config = config
        self.model_id = config.model
        path = resolve_model_path(config.model, config.revision)
        self.device = resolve_device(config.device, "reranker.device")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            path, dtype=resolve_dtype(config.dtype)
        )
        if self.model.config.num_labels != 1:
            raise ValueError(
                f"reranker {config.model} has {self.model.config.num_labels} labels, not 1"
            )
        self.model.to(self.device).eval()
        self._tokenizer_lock = threading.Lock()
        self._filler_id = filler_token_id(self.tokenizer)
        self._pad_id = int(self.tokenizer.pad_token_id or 0)
        self._multiple, self.warmup = start_up("reranker", config, self.device, self._run_shape)
        self.queue = PairQueue("reranker", self.score_pairs, config.queue)

    def score_sync(self, query: str, passages: list[str]) -> list[float]:
        return self.score_pairs([query] * len(passages), passages)[0]

    @torch.inference_mode()
    def score_pairs(self, queries: list[str], passages: list[str]) -> tuple[list[float], dict]:
        """Scores of (query, passage) pairs in input order, plus batching stats."""
        if not passages:
            return [], {"batch_size": 0}
        with self._tokenizer_lock:  # concurrent searches' threads share the fast tokenizer
            encoded = self.tokenizer(
                queries,
                passages,
                truncation="only_second",
                max_length=self.config.max_length,
            )
        lengths = [len(x) for x in encoded["input_ids"]]
        scores = [0.0] * len(passages)
        batches = token_budget_batches(
            lengths, self.config.max_batch_tokens, self.config.batch_size
        )
        for batch in batches:
            with self._tokenizer_lock:
                features = self.tokenizer.pad(
                    {k: [encoded[k][i] for i in batch] for k in encoded},
                    # Never past max_length: a multiple above it could pass the model's
                    # position limit.
                    pad_to_multiple_of=self._multiple if self._multiple > 1 else None,
                    return_tensors="pt",
                )
            if features["input_ids"].shape[1] > self.config.max_length:
                features = {k: v[:, : self.config.max_length] for k, v in features.items()}
            for index, value in zip(batch, self._scores(features), strict=True):
                scores[index] = float(value)
        stats = {
            "batch_size": len(passages),
            "model_batches": len(batches),
            "tokens": sum(lengths),
            "padding_ratio": padding_ratio(lengths, batches),
        }
        return scores, stats

    def _scores(self, features: dict[str, torch.Tensor]) -> list[float]:
        features = {k: v.to(self.device) for k, v in features.items()}
        return torch.sigmoid(self.model(**features).logits.float().view(-1)).tolist()

    def _run_shape(self, rows: int, width: int) -> None:
        input_ids, mask = synthetic_batch(rows, width, self._filler_id, self._pad_id)
        features = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self.tokenizer.model_input_names:
            features["token_type_ids"] = torch.zeros_like(input_ids)
        self._scores(features)

    async def score_with_stats(self, query: str, passages: list[str]) -> tuple[list[float], dict]:
        """Scores through the model queue, plus the batch's statistics."""
        return await self.queue.score(query, passages)

    async def score(self, query: str, passages: list[str]) -> list[float]:
        return (await self.queue.score(query, passages))[0]

    async def check_health(self) -> None:
        self.queue.check_health()

    def close(self) -> None:
        self.queue.close()


def build(config: RerankerConfig) -> CrossEncoderReranker:
    return CrossEncoderReranker(config)
