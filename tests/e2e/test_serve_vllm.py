"""The Serve application with the dense deployment on the vllm backend (vLLM on CPU, a tiny
random Qwen3): ingest and search through the whole graph over HTTP, and the dense ranking
equals the transformers backend's in process."""

import json
import os
import time

import httpx
import pytest

from tests.conftest import require_vllm
from tests.e2e.conftest import free_port
from tests.e2e.ray_metrics import metric_lines, ray_metrics

pytestmark = pytest.mark.vllm
require_vllm()

TASK = "Given a claim, retrieve abstracts that support or refute it"


def dense_section(model_dir, backend: str) -> dict:
    return {
        "backend": backend,
        "model": str(model_dir),
        "pooling": "last_token",
        "append_token": "<|endoftext|>",
        "query_instruction": TASK,
        "max_length": 256,
        "batch_size": 16,
        "max_batch_tokens": 4096,
        "dtype": "float32",
        "device": "cpu",
        "vllm": {"enforce_eager": True, "cpu_kvcache_gib": 1},
    }


@pytest.fixture(scope="module")
def corpus(scifact_dir) -> list[dict]:
    rows = []
    with (scifact_dir / "corpus.jsonl").open() as handle:
        for line in handle:
            row = json.loads(line)
            rows.append({"id": row["_id"], "title": row["title"], "text": row["text"]})
            if len(rows) == 12:
                return rows
    return rows


@pytest.fixture(scope="module")
def vllm_app(app_config_factory, tiny_qwen3_dir):
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from deployments.local.launcher import start, stop

    config = app_config_factory(
        dense=dense_section(tiny_qwen3_dir, "vllm"),
        chunker={"max_tokens": 256, "overlap_tokens": 32},  # within dense.max_length
        llm={"enabled": False},  # answers are not what this checks (and need llama.cpp)
        serve={"port": free_port()},
    )
    url = start(config, num_cpus=2)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            pytest.fail("the Serve application (vllm dense) was not ready within 240 s")
        yield url
    finally:
        stop()


async def test_search_graph_end_to_end_on_vllm(
    vllm_app, corpus, app_config_factory, tiny_qwen3_dir
):
    from serve_app.pipelines.components import build_components
    from serve_app.pipelines.ingest import IngestPipeline
    from serve_app.pipelines.search import SearchPipeline
    from serve_app.schemas import Document, ScopeKey, SearchRequest

    with httpx.Client(base_url=vllm_app, timeout=300) as http:
        ingested = http.post("/v1/documents", json={"documents": corpus})
        assert ingested.status_code == 200, ingested.text
        assert len(ingested.json()["written"]) == len(corpus)
        full = http.post("/v1/search", json={"query": corpus[3]["title"], "top_k": 5}).json()
        assert full["strategies"] == ["bm25", "splade", "dense"] and full["results"]
        assert full["results"][0]["doc_id"] == corpus[3]["id"]  # lexical strategies find it
        assert any("dense" in r["scores"] for r in full["results"])
        queries = [corpus[i]["title"] for i in (0, 5)] + ["vitamin D and bone density"]
        served = [
            http.post("/v1/search", json={"query": q, "top_k": 8, "strategies": ["dense"]}).json()[
                "results"
            ]
            for q in queries
        ]
    metrics = ray_metrics(
        [
            "serve_app_model_batch_size",
            "serve_app_model_queue_seconds",
            "serve_app_model_batch_tokens",
        ]
    )
    assert metric_lines(metrics, "serve_app_model_batch_size_count", 'model="dense"')
    from ray import serve

    info = await serve.get_deployment_handle("dense", "retrieval").info.remote()
    assert info.model_dump() == {
        "model_id": str(tiny_qwen3_dir),
        "dim": 64,
        "backend": "vllm",
        "encoder": "VllmDenseEncoder",
        "revision": None,  # a folder of its own, not a pinned fetch
    }
    assert metric_lines(metrics, "serve_app_model_queue_seconds_count", 'model="dense"')
    assert metric_lines(metrics, "serve_app_model_batch_tokens_count", 'model="dense"')

    # The same corpus through the transformers backend in process: the same dense ranking.
    local_config = app_config_factory(
        dense=dense_section(tiny_qwen3_dir, "transformers"),
        chunker={"max_tokens": 256, "overlap_tokens": 32},
        llm={"enabled": False},
        splade={"enabled": False},
        search={"strategies": ["bm25", "dense"]},
    )
    components = await build_components(local_config)
    try:
        await IngestPipeline(components).ingest(
            ScopeKey("default"), [Document(**d) for d in corpus]
        )
        search = SearchPipeline(components)
        for query, theirs in zip(queries, served, strict=True):
            request = SearchRequest(query=query, top_k=8, strategies=["dense"])
            mine = (await search.search(request, ScopeKey("default"))).results
            # Stored chunk ids carry the document version, whose hash includes the dense
            # backend; the chunk itself is (document, position).
            assert [(r.chunk.doc_id, r.chunk.order) for r in mine] == [
                (r["doc_id"], r["order"]) for r in theirs
            ]
            for a, b in zip(mine, theirs, strict=True):
                assert a.scores["dense"] == pytest.approx(b["scores"]["dense"], abs=1e-4)
    finally:
        await components.close()
