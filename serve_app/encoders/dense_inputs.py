"""What every dense backend does around the model: query instructions, token ids with the
appended pooling token, and Matryoshka truncation. Shared so that backends agree exactly."""

from __future__ import annotations

import threading

import numpy as np
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from serve_app.config import DenseConfig, resolve_model_path
from serve_app.encoders.token_batches import filler_token_id
from serve_app.errors import ConfigError


class DenseInputs:
    """Turns texts into the token ids a dense model pools over, and vectors into outputs.

    - Queries are wrapped in ``query_template`` when ``query_instruction`` is set
      (Qwen3-Embedding: ``Instruct: {task}\\nQuery: {query}``); documents never are.
    - Token ids carry the tokenizer's special tokens, are truncated to ``max_length`` including
      ``append_token`` (Qwen3-Embedding pools on an appended ``<|endoftext|>``), and the token
      is appended unless the tokenizer already ends every input with it (the published
      Qwen3-Embedding tokenizers do), so it is never doubled.
    """

    def __init__(self, config: DenseConfig, tokenizer: PreTrainedTokenizerBase | None = None):
        self.config = config
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(
            resolve_model_path(config.model, config.revision)
        )
        self.append_id: int | None = None
        if config.append_token is not None:
            token_id = self.tokenizer.convert_tokens_to_ids(config.append_token)
            if token_id is None or token_id == self.tokenizer.unk_token_id:
                raise ValueError(
                    f"dense.append_token {config.append_token!r} is not in the vocabulary"
                )
            self.append_id = int(token_id)
        probe = self.tokenizer("a", add_special_tokens=True)["input_ids"]
        self._tokenizer_appends = self.append_id is not None and probe[-1] == self.append_id
        self.warmup_id = filler_token_id(self.tokenizer)
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (self.append_id or 0))
        self._lock = threading.Lock()

    def format_query(self, query: str) -> str:
        if self.config.query_instruction:
            return self.config.query_template.format(
                task=self.config.query_instruction, query=query
            )
        return query

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids per text, at most ``max_length`` long, ending in the appended token.
        Thread-safe: a fast tokenizer's call sets its truncation state, which two lanes'
        threads must not do at once ("Already borrowed")."""
        with self._lock:
            if self.append_id is None or self._tokenizer_appends:
                return self.tokenizer(
                    texts,
                    add_special_tokens=True,
                    truncation=True,
                    max_length=self.config.max_length,
                )["input_ids"]
            room = self.config.max_length - 1
            encoded = self.tokenizer(
                texts, add_special_tokens=True, truncation=True, max_length=room
            )
        return [[*ids, self.append_id] for ids in encoded["input_ids"]]


def output_dim(config: DenseConfig, model_dim: int) -> int:
    """The served dimension: ``dense.output_dim`` (Matryoshka) if set, else the model's."""
    if config.output_dim is None:
        return model_dim
    if config.output_dim > model_dim:
        raise ConfigError(
            f"dense.output_dim ({config.output_dim}) exceeds the model's dimension ({model_dim})"
        )
    return config.output_dim


def finish_vectors(vectors: np.ndarray, dim: int, normalize: bool) -> np.ndarray:
    """Keep the first ``dim`` columns (Matryoshka truncation) and L2-normalise rows, float32."""
    out = np.ascontiguousarray(vectors[:, :dim], dtype=np.float32)
    if normalize and len(out):
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.maximum(norms, 1e-12)
    return out
