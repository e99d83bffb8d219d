"""Reading a BEIR-layout folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from serve_app.errors import InvalidInputError
from serve_app.schemas import Document


@dataclass
class BeirDataset:
    name: str
    corpus: list[Document]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line_number, raw in enumerate(path.read_text().splitlines(), 1):
        parts = raw.strip().replace("\r", "").split("\t")
        if not raw.strip() or (line_number == 1 and parts[0] == "query-id"):
            continue
        if len(parts) != 3:
            raise InvalidInputError(f"{path}:{line_number}: expected 3 tab-separated columns")
        query_id, doc_id, score = parts
        qrels.setdefault(query_id, {})[doc_id] = int(score)
    return qrels


def load_beir(folder: str | Path, split: str, max_docs: int | None = None) -> BeirDataset:
    root = Path(folder)
    for needed in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        if not (root / needed).is_file():
            raise InvalidInputError(f"{root} is not a BEIR folder: {needed} is missing")
    qrels = read_qrels(root / "qrels" / f"{split}.tsv")
    corpus: list[Document] = []
    with (root / "corpus.jsonl").open() as handle:
        for line in handle:
            if not line.strip():
                continue
            row = json.loads(line)
            text = (row.get("text") or "").strip()
            title = (row.get("title") or "").strip()
            if not text and not title:
                continue
            corpus.append(
                Document(
                    id=str(row["_id"]),
                    title=title,
                    text=text or title,
                    source=f"{root.name}/corpus.jsonl",
                )
            )
    if max_docs is not None:
        judged = {d for rel in qrels.values() for d in rel}
        kept = [d for d in corpus if d.id in judged]
        kept += [d for d in corpus if d.id not in judged][: max(0, max_docs - len(kept))]
        corpus = kept
    queries = {}
    with (root / "queries.jsonl").open() as handle:
        for line in handle:
            if line.strip():
                row = json.loads(line)
                if str(row["_id"]) in qrels:
                    queries[str(row["_id"])] = row["text"]
    return BeirDataset(name=root.name, corpus=corpus, queries=queries, qrels=qrels)
