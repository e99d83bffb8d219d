"""Every suite runs for a few seconds on a tiny corpus through its one entry point, so none of
them can rot. These check that the suites run and write well-formed reports, not any figure."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from benchmarks.gate import OFF_TOPIC
from tests.support.data import SMOLLM2

ROOT = Path(__file__).resolve().parents[2]
SUITES = "{load,ingest,quality,startup,scale,search-during-ingest,serving-path,gpu,answers,playground}"
# Ray's metrics export every 2 s instead of 10 s: a suite that reads the model calls from the
# metrics waits one export interval (benchmarks/model_calls.py: export_wait_s).
FAST_METRICS = {"RAY_metrics_report_interval_ms": "2000"}


def run(*args: str, module: str = "benchmarks", timeout: int = 600) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **FAST_METRICS}
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def report(stem: Path) -> dict:
    assert stem.with_suffix(".md").read_text().startswith("#")
    return json.loads(stem.with_suffix(".json").read_text())


def tiny_config(tmp_path: Path) -> Path:
    config = yaml.safe_load((ROOT / "config" / "local.yaml").read_text())
    config["data_dir"] = str(tmp_path / "data")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_entry_point_lists_every_suite():
    assert SUITES in run("--help")
    assert "--sweep-start" in run("load", "--help")


def test_ingest_suite(tmp_path, scifact_dir):
    out = tmp_path / "ingest"
    run("ingest", "--docs", "12", "--docs-per-request", "4", "--clients", "2",
        "--config", str(tiny_config(tmp_path)), "--corpus", str(scifact_dir), "--out", str(out),
        timeout=900)  # fmt: skip
    ingested = report(out)
    assert ingested["http"]["documents"] == 12 and ingested["http"]["failed_requests"] == 0
    assert ingested["http"]["chunks"] >= 12 and ingested["http_over_slower_encoder"] > 0
    assert set(ingested["ceiling"]["chunks_per_s"]) == {"dense", "splade"}
    # The same documents again: all unchanged, nothing written.
    assert ingested["again"]["unchanged"] == 12 and ingested["again"]["chunks"] == 0
    assert any(kind.startswith("replica") for kind in ingested["cores_by_process"])


def test_quality_suite_per_topology(tmp_path, scifact_small):
    out = tmp_path / "quality"
    run("quality", "--config", str(tiny_config(tmp_path)), "--beir", str(scifact_small),
        "--max-queries", "8", "--depth", "50", "--topologies", "embedded,opensearch+qdrant",
        "--out", str(out))  # fmt: skip
    topologies = report(out)["topologies"]
    assert set(topologies) == {"embedded", "opensearch+qdrant"}
    for results in topologies.values():
        assert {"bm25", "splade", "dense"} <= set(results)
    # The same vectors give the same dense ranking under both topologies.
    dense = {t: results["dense"]["ndcg@10"] for t, results in topologies.items()}
    assert dense["embedded"] == dense["opensearch+qdrant"]
    assert out.with_suffix(".png").stat().st_size > 0


def test_scale_suite(tmp_path):
    out = tmp_path / "scale"
    run("scale", "--sizes", "300", "1000", "--queries", "5", "--batch", "500", "--out", str(out))
    sizes = report(out)["sizes"]
    assert set(sizes) == {"300", "1000"} and sizes["1000"]["dense"]["p50_ms"] > 0


def test_startup_suite(tmp_path):
    out = tmp_path / "startup"
    run("startup", "--docs", "10", "--search-s", "2", "--out", str(out), timeout=900)
    started = report(out)
    assert started["ready_seconds"] > 0 and started["ingest"]["chunks"] >= 10
    assert started["search"]["ok"] > 0 and not started["search"]["errors"]
    assert "replica dense" in started["rss_mb"]


def test_serving_path_suite(tmp_path):
    """Tiny encoders, in process and through Serve, closed loop, sweep and py-spy profiles."""
    out = tmp_path / "serving_path"
    run("serving-path", "--docs", "30", "--clients", "4", "--duration", "1", "--warmup", "0.3",
        "--sweep", "--sweep-duration", "0.5", "--profile-s", "1", "--out", str(out),
        timeout=900)  # fmt: skip
    served = report(out)
    assert served["models"] == "tiny random" and served["index"]["chunks"] > 0
    for path in ("in_process", "serve"):
        closed = served[path]["closed_loop"]
        assert closed["achieved_qps"] > 0 and not closed["errors"]
        assert closed["cpu_ms_per_query"] > 0
        assert len(served[path]["host_probe_ms"]) == 2 and min(served[path]["host_probe_ms"]) > 0
        assert "max_sustainable_qps" in served[path]["sweep"]
    by_process = served["serve"]["closed_loop"]["cpu_ms_per_query_by_process"]
    assert any(k.startswith("replica") for k in by_process)
    assert served["serve"]["profile"], "py-spy sampled no replica"
    # Read back from Ray's metrics agent: every search calls both encoders, and concurrent
    # searches (4 clients) never make more calls than queries.
    calls = served["serve"]["model_calls"]
    assert set(calls) == {"dense", "splade"}
    for model in calls.values():
        assert model["calls"] > 0 and model["queries_per_call"] >= 1
        assert sum(model["calls_by_size"].values()) == model["calls"]


def test_search_during_ingest_suite(tmp_path, plos_dir):
    folder = tmp_path / "docs"
    folder.mkdir()
    for path in sorted(plos_dir.glob("*.xml"))[:2]:
        (folder / path.name).write_bytes(path.read_bytes())
    out = tmp_path / "sdi"
    run("search-during-ingest", "--folder", str(folder), "--duration", "4", "--slice", "2",
        "--rate", "2", "--config", str(tiny_config(tmp_path)), "--out", str(out),
        timeout=900)  # fmt: skip
    measured = report(out)
    assert measured["searches"]["requests"] > 0 and measured["ingest"]["files_total"] in (0, 2)
    assert measured["stop"]["after_sigint_s"] < 30 and measured["stop"]["left"] == []


def test_answers_suite(tmp_path, scifact_small):
    """SmolLM2 (the tests' LLM) answers two claims at each level, rewrites two queries,
    cites over two claims (train split), sets the relevance floor against the off-topic
    questions, answers two hostile documents (a plain order, a turn switch) under each
    condition and repeats one: the suite's measures, each reported. The order's words never
    reach the defended prompt, and do reach it without the order guard."""
    from benchmarks.injection import CONDITIONS

    config = yaml.safe_load(tiny_config(tmp_path).read_text())
    config["llm"] = {**config.get("llm", {}), **SMOLLM2}
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "answers"
    run("answers", "--config", str(path), "--scifact", str(scifact_small), "--max-docs", "40",
        "--data-dir", str(tmp_path / "index"), "--concurrency", "1,2", "--latency-tokens", "8",
        "--queries", "2", "--depth", "20", "--claims", "2", "--answer-tokens", "32",
        "--split", "train", "--suites", "latency,multi_query,citations,gate,injection,contradictions",
        "--injection-topics", "1", "--injection-phrasings", "1", "--injection-repeats", "2",
        "--injection-attacks", "body,control", "--waves", "1",
        "--out", str(out), timeout=900)  # fmt: skip
    measured = report(out)
    assert measured["model"] == SMOLLM2["model"] and measured["index"]["documents"] >= 2
    assert [level["concurrency"] for level in measured["latency"]] == [1, 2]
    assert 0 <= measured["multi_query"]["multi"]["ndcg@10"] <= 1
    # As the pipeline runs with understanding on: the question is the heavy list, the
    # model's rewrite alone is measured beside it.
    assert measured["multi_query"]["heavy_list"] == "question"
    assert 0 <= measured["multi_query"]["understood"]["ndcg@10"] <= 1
    grid = measured["multi_query"]["grid"]
    assert len(grid) == 45 and measured["split"] == "train"
    # The grid re-scores the same lists: at the configuration's (w, k, v) it is the multi run.
    setting = ("similarity_weight", "rrf_k", "question_weight")
    configured = tuple(measured["multi_query"][key] for key in setting)
    at_default = next(r for r in grid if tuple(r[key] for key in setting) == configured)
    assert at_default["ndcg@10"] == measured["multi_query"]["multi"]["ndcg@10"]
    assert "## Multi-query" in out.with_suffix(".md").read_text()
    assert measured["citations"]["claims"] == 2
    assert measured["citations"]["top_k"] == [config["answer"]["top_k"]]
    assert 0 <= (measured["citations"]["citation_support"] or 0) <= 1
    gate = measured["gate"]
    assert gate["answerable"]["n"] == 2 and gate["off_topic"]["n"] == len(OFF_TOPIC)
    overruled = [row["off_topic_overruled"] for row in gate["grid"]]
    assert overruled == sorted(overruled, reverse=True) and overruled[-1] == 0
    # The floor sits above every off-topic question's best passage.
    assert gate["chosen_floor"] > gate["off_topic"]["max"]
    assert "## The relevance gate's floor" in out.with_suffix(".md").read_text()
    rows = measured["injection"]["rows"]
    assert set(rows) == {f"{a}:{c}" for a in ("body", "control") for c in CONDITIONS} | {
        f"{a}:{c}" for a in ("repeated", "interleaved") for c in ("defended", "before")
    }
    assert all(row["n"] == 1 for key, row in rows.items() if not key.startswith("repeated"))
    assert rows["repeated:defended"]["n"] == 2 and 0 <= rows["body:before"]["rate"] <= 1
    assert rows["body:defended"]["reached"] == rows["control:defended"]["reached"] == 0
    assert rows["body:before"]["reached"] == rows["control:before"]["reached"] == 1
    assert "## Injection" in out.with_suffix(".md").read_text()
    forms = measured["contradictions"]["forms"]
    assert forms["true"]["n"] == 2 and forms["true"]["overlap"] == 2
    assert "## Contradictions" in out.with_suffix(".md").read_text()


def test_playground_suite(tmp_path, scifact_small):
    out = tmp_path / "playground"
    run("playground", "--corpus", str(scifact_small), "--loads", "2", "--docs", "5",
        "--out", str(out))  # fmt: skip
    measured = report(out)
    assert measured["bytes"]["/"] > 0 and measured["bytes"]["/playground/app.js"] > 0
    assert measured["fcp_ms"]["median"] > 0 and measured["search_drawn_ms"]["median"] > 0
