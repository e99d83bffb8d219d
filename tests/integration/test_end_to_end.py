"""Ingest and search on real corpora with the real small models, in-process."""

import json
from pathlib import Path

import pytest

from serve_app.cli import main
from serve_app.loaders import load_file
from serve_app.pipelines.components import build_components
from serve_app.pipelines.ingest import IngestPipeline
from serve_app.pipelines.search import SearchPipeline
from serve_app.schemas import ScopeKey, SearchFilters, SearchRequest

ROOT = Path(__file__).resolve().parents[2]
ARTICLES = ("pbio.0020188", "pntd.0000149", "pone.0008519")


@pytest.mark.parametrize("chunker", ["sliding_window", "sections", "imrad"])
async def test_plos_articles_with_each_chunker(app_config_factory, plos_dir, chunker):
    # Three research articles from three journals, among the shorter ones (the encoders' time
    # grows with the text; the chunkers' paths are the same).
    files = [plos_dir / f"journal.{name}.xml" for name in ARTICLES]
    documents = [load_file(f) for f in files]
    components = await build_components(app_config_factory(chunker={"name": chunker}))
    try:
        ingest = IngestPipeline(components)
        first = await ingest.ingest(ScopeKey("default"), documents)
        count = await components.index.count(ScopeKey("default"))
        assert count == first.chunks_written >= 2 * len(documents)
        again = await ingest.ingest(ScopeKey("default"), [load_file(f) for f in files])
        assert len(again.unchanged) == len(documents)
        assert await components.index.count(ScopeKey("default")) == count

        search = SearchPipeline(components)
        target = documents[2]
        response = await search.search(
            SearchRequest(query=target.title, top_k=5), ScopeKey("default")
        )
        assert target.id in {r.chunk.doc_id for r in response.results}
        hit = next(r for r in response.results if r.chunk.doc_id == target.id)
        assert hit.chunk.metadata["doi"] == target.id and hit.chunk.source.endswith(".xml")
        if chunker == "imrad":
            methods = await search.search(
                SearchRequest(
                    query="statistical analysis",
                    filters=SearchFilters(metadata={"imrad": "Methods"}),
                ),
                ScopeKey("default"),
            )
            assert methods.results and all(
                r.chunk.metadata["imrad"] == "Methods" for r in methods.results
            )
    finally:
        await components.close()


def test_eval_cli_on_a_scifact_slice(tmp_path, scifact_small, capsys):
    import yaml

    from serve_app.evaluation.beir import read_qrels
    from serve_app.evaluation.metrics import evaluate_run, read_trec_run

    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    out = tmp_path / "eval.json"
    argv = [
        "--config",
        str(config_path),
        "eval",
        "--beir",
        str(scifact_small),
        "--split",
        "test",
        "--max-docs",
        "60",
        "--max-queries",
        "10",
        "--depth",
        "100",
        "--json",
        str(out),
        "--runs",
        str(tmp_path / "runs"),
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    saved = json.loads(out.read_text())
    report = saved["results"]
    for name in ("bm25", "splade", "dense", "rrf(bm25+splade+dense)", "dbsf(bm25+dense)"):
        assert name in report and name in printed
        assert set(report[name]) == {"ndcg@10", "recall@100", "mrr@10"}
    # Every judged document is in the index (it holds them first); a working retriever is far above chance.
    assert all(report[s]["ndcg@10"] > 0.5 for s in ("bm25", "splade", "dense"))
    assert "best fused" in printed
    # The default configuration comes first, by name, as /v1/search answers it.
    assert next(iter(report)) == "default"
    search = config["search"]
    assert saved["default"]["strategies"] == search["strategies"]
    assert saved["default"]["fusion"]["method"] == search["fusion"]["method"]
    table = printed[printed.index("nDCG@10") :].splitlines()
    assert table[1].split()[0] == "default"
    assert saved["default"]["name"] in printed
    # One TREC run file per run; any tool re-scores them to the printed figures.
    runs = tmp_path / "runs" / "scifact-test"
    files = sorted(runs.glob("*.trec"))
    assert len(files) == len(report)
    qrels = read_qrels(scifact_small / "qrels" / "test.tsv")
    qrels = {q: qrels[q] for q in sorted(qrels)[:10]}
    for name in ("default", "dbsf(bm25+dense)"):
        stem = name.replace("(", "_").replace(")", "")
        assert evaluate_run(read_trec_run(runs / f"{stem}.trec"), qrels) == report[name]
