"""SPLADE sparse encoder: log1p(relu(logits)) max-pooled over real tokens, then pruned."""

from __future__ import annotations

import threading

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForMaskedLM, AutoTokenizer

from serve_app.config import SpladeConfig, resolve_model_path
from serve_app.encoders.queue import Lane, ModelQueue
from serve_app.encoders.token_batches import (
    filler_token_id,
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
from serve_app.errors import ConfigError
from serve_app.schemas import SparseVector

# Logits computed per vocabulary slice, at most this many elements at a time: on a CPU a
# slice that stays in cache makes the projection + max 2-4x faster than one batch-wide
# tensor (measured with the 2-layer SPLADE: 16 queries 73 -> 35 ms, 32 abstracts at 256
# tokens 999 -> 531 ms; 2^19-2^21 all close). On a GPU a few large slices keep the kernels
# big while bounding the memory a batch holds (1 GB of fp16 logits for 32 x 512 tokens).
SLICE_ELEMENTS = {"cpu": 1 << 20, "cuda": 1 << 27}

# On a CPU only the real tokens go through the vocabulary projection: padding is a third of a
# batch of 8 SciFact claims' positions and nearly half of 16, and the projection costs the
# same per position (docs/benchmarks.md, "SPLADE pooling"). On a GPU the
# projection is cheap and each query's reduction would be a kernel launch of its own, so
# padding stays and is neutralised instead.
PACK_TOKENS = {"cpu": True, "cuda": False}


class SpladeEncoder:
    """SPLADE for documents and queries (same model; queries pruned harder).

    Max-pooling the logits before ``log1p(relu(.))`` equals pooling after it (the activation
    is monotonic). Padding takes no part in the max: on a CPU only real tokens are projected
    (``PACK_TOKENS``), on a GPU padding's logits are zeroed. The model runs up to its
    LM head's last hidden states; the vocabulary projection (the head's output layer) is
    applied here slice by slice, each slice reduced by the max as soon as it exists, so the
    batch x tokens x vocabulary tensor is never whole (see ``SLICE_ELEMENTS``). Pruning keeps
    the ``top_k`` largest weights above ``min_weight``, on the device, before anything is copied.
    Term strings come with every vector (OpenSearch stores SPLADE as ``rank_features``).
    """

    def __init__(self, config: SpladeConfig) -> None:
        self.config = config
        self.model_id = config.model
        path = resolve_model_path(config.model, config.revision)
        self.device = resolve_device(config.device, "splade.device")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForMaskedLM.from_pretrained(path, dtype=resolve_dtype(config.dtype))
        self.model.to(self.device).eval()
        self._projection_weight, self._projection_bias = _detach_projection(self.model)
        self._slice_elements = SLICE_ELEMENTS.get(self.device.type, SLICE_ELEMENTS["cpu"])
        self._pack_tokens = PACK_TOKENS.get(self.device.type, True)
        self._vocab = np.asarray(
            self.tokenizer.convert_ids_to_tokens(list(range(len(self.tokenizer)))), dtype=object
        )
        self._pad_id = int(self.tokenizer.pad_token_id or 0)
        self._filler_id = filler_token_id(self.tokenizer)
        self._tokenizer_lock = threading.Lock()
        self._multiple, self.warmup = start_up("splade", config, self.device, self._run_shape)
        self.queue = ModelQueue(
            "splade",
            self._run_lane,
            config.queue.query_batch_size,
            config.queue.documents(config.batch_size),
        )

    def encode(self, texts: list[str], top_k: int) -> list[SparseVector]:
        """Blocking encode; vectors in input order."""
        return self.encode_with_stats(texts, top_k)[0]

    @torch.inference_mode()
    def encode_with_stats(self, texts: list[str], top_k: int) -> tuple[list[SparseVector], dict]:
        """Vectors plus batching stats (texts, model batches, padding ratio)."""
        if not texts:
            return [], {"batch_size": 0}
        with self._tokenizer_lock:  # the two lanes' threads share the fast tokenizer
            ids = self.tokenizer(
                texts, add_special_tokens=True, truncation=True, max_length=self.config.max_length
            )["input_ids"]
        lengths = [len(x) for x in ids]
        out: list[SparseVector | None] = [None] * len(texts)
        batches = token_budget_batches(
            lengths, self.config.max_batch_tokens, self.config.batch_size
        )
        for batch in batches:
            width = padded_width(
                max(lengths[i] for i in batch), self._multiple, self.config.max_length
            )
            input_ids = torch.full((len(batch), width), self._pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.bool)
            for row, index in enumerate(batch):
                input_ids[row, : lengths[index]] = torch.tensor(ids[index])
                mask[row, : lengths[index]] = True
            values_np, indices_np = self._top_terms(
                input_ids, mask, [lengths[i] for i in batch], top_k
            )
            keep = values_np > self.config.min_weight
            for row, index in enumerate(batch):
                row_idx = indices_np[row][keep[row]]
                # Built from the model's own output (unique ids, equal lengths): no
                # re-validation of thousands of vectors per ingest batch.
                out[index] = SparseVector.model_construct(
                    indices=row_idx.tolist(),
                    values=values_np[row][keep[row]].tolist(),
                    terms=self._vocab[row_idx].tolist(),
                )
        stats = {
            "batch_size": len(texts),
            "model_batches": len(batches),
            "tokens": sum(lengths),
            "padding_ratio": padding_ratio(lengths, batches),
        }
        return [v for v in out if v is not None], stats

    def _top_terms(
        self, input_ids: torch.Tensor, mask: torch.Tensor, lengths: list[int], top_k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``top_k`` largest pooled weights of each row and their term ids, on the host."""
        input_ids, mask = to_device(self.device, input_ids, mask)
        hidden = self.model(input_ids=input_ids, attention_mask=mask.long()).logits
        weights = self._pooled_weights(hidden, mask, lengths)
        values, indices = torch.topk(weights, min(top_k, weights.shape[1]), dim=1)
        # One copy to the host per batch; rows become vectors by slicing, not loops.
        return values.cpu().numpy(), indices.cpu().numpy()

    def _run_shape(self, rows: int, width: int) -> None:
        input_ids, mask = synthetic_batch(rows, width, self._filler_id, self._pad_id)
        lengths = mask.sum(dim=1).tolist()
        self._top_terms(input_ids, mask.bool(), lengths, self.config.doc_top_k)

    def _pooled_weights(
        self, hidden: torch.Tensor, mask: torch.Tensor, lengths: list[int]
    ) -> torch.Tensor:
        """log1p(relu(max over real tokens of the vocabulary logits)), (batch, vocab) float32.

        ``mask`` (on ``hidden``'s device) marks the real tokens, ``lengths`` counts them per row.
        """
        batch, width, dim = hidden.shape
        vocab = self._projection_weight.shape[0]
        pooled = hidden.new_empty((batch, vocab))
        padded = any(n != width for n in lengths)
        packed = padded and self._pack_tokens
        keep = None
        if packed:
            # Row-major, so each row's real tokens are contiguous, in row order.
            tokens = hidden.reshape(batch * width, dim)[mask.reshape(-1)]
        else:
            tokens = hidden.reshape(batch * width, dim)
            if padded:
                # Zeroing padding positions: relu(max over all of x * mask) equals relu(max
                # over the real tokens of x), in one in-place pass per slice.
                keep = mask.reshape(batch * width, 1).to(hidden.dtype)
        step = max(1024, self._slice_elements // tokens.shape[0])
        bias = self._projection_bias
        for start in range(0, vocab, step):
            end = min(vocab, start + step)
            logits = F.linear(
                tokens,
                self._projection_weight[start:end],
                None if bias is None else bias[start:end],
            )
            # amax, not max(dim): no argmax to compute (25x faster on CPU for one query).
            if packed:
                offset = 0
                for row, count in enumerate(lengths):
                    torch.amax(logits[offset : offset + count], dim=0, out=pooled[row, start:end])
                    offset += count
                continue
            if keep is not None:
                logits.mul_(keep)
            torch.amax(logits.view(batch, width, end - start), dim=1, out=pooled[:, start:end])
        return torch.log1p(torch.relu_(pooled)).float()

    def _run_lane(self, lane: Lane, texts: list[str]) -> tuple[list[SparseVector], dict]:
        top_k = self.config.query_top_k if lane == "query" else self.config.doc_top_k
        return self.encode_with_stats(texts, top_k)

    async def encode_lane(self, lane: Lane, texts: list[str]) -> tuple[list[SparseVector], dict]:
        """Vectors (queries pruned to ``query_top_k``) and batch statistics, queued."""
        vectors, stats = await self.queue.submit(lane, texts)
        return list(vectors), stats

    async def encode_documents(self, texts: list[str]) -> list[SparseVector]:
        return (await self.encode_lane("document", texts))[0]

    async def encode_queries(self, texts: list[str]) -> list[SparseVector]:
        return (await self.encode_lane("query", texts))[0]

    async def check_health(self) -> None:
        self.queue.check_health()

    def close(self) -> None:
        self.queue.close()


def _detach_projection(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Takes the vocabulary projection (the masked-LM head's output layer) out of ``model``,
    leaving the head's transform: the model then returns last hidden states, and the
    projection's weight and bias are returned for ``SpladeEncoder._pooled_weights``."""
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):
        raise ConfigError(
            f"splade.model: the masked-LM head's output layer is {type(head).__name__}, "
            "not a linear vocabulary projection; this encoder supports BERT-style MLM heads"
        )
    for module in model.modules():
        for name, child in module.named_children():
            if child is head:
                setattr(module, name, torch.nn.Identity())
                bias = None if head.bias is None else head.bias.detach()
                return head.weight.detach(), bias
    raise ConfigError("splade.model: the masked-LM head's output layer is not a submodule")
