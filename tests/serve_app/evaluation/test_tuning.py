"""``serve-app tune`` on a small real BEIR folder (SciFact claims and abstracts, real small
models, the smoke grid): every method is tried and reported, the choice is a valid
configuration that scores at least the configuration it started from, the held-out split is
read only when asked and only after the choice, and encodings are reused across runs and by
``serve-app eval --reuse-encodings``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from serve_app.cli import main
from serve_app.config import config_from_dict, merge_dicts
from tests.support.data import small_beir

ROOT = Path(__file__).resolve().parents[3]
STAGES = {
    "baseline",
    "bm25",
    "bm25-fields",
    "bm25-rm3",
    "splade-q",
    "chunking-single",
    "chunking",
    "fusion",
    "candidates",
    "aggregation",
    "ablation",
}


def beir_docs(folder: Path) -> list[str]:
    return (folder / "corpus.jsonl").read_text().splitlines()


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, scifact_dir) -> tuple[Path, Path, Path]:
    """(config, BEIR folder, report stem) of one smoke tune on train (test qrels present)."""
    tmp_path = tmp_path_factory.mktemp("tune")
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    beir = small_beir(scifact_dir, tmp_path / "beir", {"train": 10, "test": 6}, others=15)
    out = tmp_path / "first"
    assert tune(config_path, beir, out) == 0
    return config_path, beir, out


def tune(config_path: Path, beir: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "--config",
            str(config_path),
            "tune",
            "--beir",
            str(beir),
            "--split",
            "train",
            "--chunkings",
            "128/16/128",
            "--out",
            str(out),
            "--grid",
            "smoke",
            *extra,
        ]
    )


def test_tune_tries_every_method_and_writes_a_valid_choice(tuned):
    config_path, _, out = tuned
    report = json.loads(out.with_suffix(".json").read_text())
    assert {t["stage"] for t in report["trials"]} == STAGES
    assert report["split"] == "train" and "final_split" not in report
    # Every stage's choice is marked; the per-strategy stages try every method.
    methods = {t["method"] for t in report["trials"]}
    assert any(m.startswith("RM3") for m in methods)
    assert any(m.startswith("separate fields") for m in methods)
    assert any(m.startswith("BM25F") for m in methods)
    assert {"query terms 16", "query terms 64 (as configured)"} <= methods
    assert {"rrf", "weighted", "dbsf"} <= {t["setting"]["method"] for t in report["trials"]}

    # The choice never scores below the configuration it started from (on the tuning split).
    rows = {row["method"]: row["train"]["ndcg@10"] for row in report["methods"]}
    assert rows["chosen configuration"] >= rows["configuration before tuning"]
    assert {"bm25 alone", "splade alone", "dense alone"} <= set(rows)

    # The written choice is a configuration the service loads, and it is what was chosen.
    overrides = yaml.safe_load(out.with_suffix(".yaml").read_text())
    config = config_from_dict(
        merge_dicts(yaml.safe_load(config_path.read_text()), overrides), "tuned"
    )
    chosen = report["chosen"]
    assert config.search.fusion.method == chosen["method"]
    assert config.search.candidates == chosen["candidates"]
    assert config.bm25.k1 == chosen["bm25"]["k1"]
    assert config.splade.query_top_k == chosen["splade_query_terms"]
    assert set(config.search.strategies) == {s for s, w in chosen["weights"].items() if w > 0}
    assert "| ablation |" in out.with_suffix(".md").read_text()


def test_held_out_split_is_scored_for_every_method_and_encodings_are_reused(
    tuned, tmp_path, monkeypatch, capsys
):
    config_path, beir, first_out = tuned

    # Second run: the corpus's chunks are read from the cache, not encoded again.
    import serve_app.evaluation.beir as beir_module
    import serve_app.evaluation.encodings as encodings

    encoded: list[str] = []
    real_fill = encodings.fill

    def counting_fill(cache, texts, encode, what, batch=512):
        if cache.missing(texts):
            encoded.append(what)
        return real_fill(cache, texts, encode, what, batch)

    loaded: list[str] = []
    real_load = beir_module.load_beir

    def spy(folder, split, max_docs=None):
        loaded.append(split)
        return real_load(folder, split, max_docs)

    monkeypatch.setattr(encodings, "fill", counting_fill)
    monkeypatch.setattr(beir_module, "load_beir", spy)
    out = tmp_path / "second"
    assert tune(config_path, beir, out, "--final-split", "test") == 0
    assert loaded == ["train", "test"]
    assert encoded and all(what.endswith("queries") for what in encoded)  # test claims only
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["final_split"] == "test"
    assert all(set(row) >= {"method", "train", "test"} for row in report["methods"])
    first = json.loads(first_out.with_suffix(".json").read_text())
    assert report["chosen"] == first["chosen"]  # the held-out split changed nothing

    # An eval at one of the tuned chunkings indexes the cached vectors, and scores what
    # encoding them again scores.
    monkeypatch.undo()
    config = yaml.safe_load(config_path.read_text())
    config["chunker"].update(max_tokens=128, overlap_tokens=16)
    config["dense"]["max_length"] = config["splade"]["max_length"] = 128
    results = []
    for reuse in (True, False):
        if not reuse:
            config["data_dir"] = str(tmp_path / "fresh")
        path = tmp_path / f"eval-{reuse}.yaml"
        path.write_text(yaml.safe_dump(config))
        argv = ["--config", str(path), "eval", "--beir", str(beir), "--split", "test"]
        argv += ["--json", str(tmp_path / f"eval-{reuse}.json")]
        assert main([*argv, "--reuse-encodings"] if reuse else argv) == 0
        results.append(json.loads((tmp_path / f"eval-{reuse}.json").read_text())["results"])
        if reuse:
            lines = [
                line
                for line in capsys.readouterr().out.splitlines()
                if line.endswith(" chunk encodings reused from the cache")
            ]
            reused = {int(line.split(": ")[-1].split()[0]) for line in lines}
            assert len(lines) == 2 and len(reused) == 1 and reused.pop() > len(beir_docs(beir))
    for name in results[0]:
        assert results[0][name]["ndcg@10"] == pytest.approx(results[1][name]["ndcg@10"], abs=2e-4)
