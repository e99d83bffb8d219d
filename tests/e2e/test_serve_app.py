"""End to end over HTTP on a real local Ray Serve application (deployments per model)."""

import asyncio
import json
import time

import httpx
import pytest

# Imported at collection, before the session's local run sets Serve's switches: the handles
# this process builds keep Ray Serve's default transport (see the transport test below).
from ray.serve._private.handle_options import DynamicHandleOptions

from deployments.settings import service_config
from serve_app.pipelines.components import build_components
from serve_app.pipelines.ingest import IngestPipeline
from serve_app.pipelines.search import SearchPipeline
from serve_app.schemas import Document, ScopeKey, SearchRequest
from tests.e2e.ray_metrics import metric_lines, ray_metrics
from tests.helm.test_chart import CHART, HELM, objects
from tests.helm.test_monitoring import MONITORING, rule_metric_names

A = {"X-API-Key": "key-a"}
B = {"X-API-Key": "key-b"}
READ_ONLY = {"X-API-Key": "key-read"}


def scifact(scifact_dir, n: int) -> list[dict]:
    rows = []
    with (scifact_dir / "corpus.jsonl").open() as handle:
        for line in handle:
            row = json.loads(line)
            rows.append({"id": row["_id"], "title": row["title"], "text": row["text"]})
            if len(rows) == n:
                break
    return rows


@pytest.fixture(scope="module")
def corpus(scifact_dir):
    return scifact(scifact_dir, 30)


@pytest.fixture(scope="module")
def ingested(serve_url, corpus):
    with httpx.Client(base_url=serve_url, timeout=300) as client:
        response = client.post("/v1/documents", json={"documents": corpus}, headers=A)
        assert response.status_code == 200, response.text
        return response.json()


def test_ingest_search_delete_reingest(http, ingested, corpus, plos_dir):
    assert ingested["documents"] == len(corpus) and len(ingested["written"]) == len(corpus)
    target = corpus[5]
    found = http.post("/v1/search", json={"query": target["title"], "top_k": 3}, headers=A).json()
    top = found["results"][0]
    assert top["doc_id"] == target["id"] and top["text"] in target["text"]
    assert set(top["scores"]) == {"bm25", "splade", "dense"} and top["chunk_id"]

    # multipart upload of a real JATS article, with provenance on the hits
    article = plos_dir / "journal.pcbi.1004082.xml"
    upload = http.post(
        "/v1/documents",
        files=[("files", (article.name, article.read_bytes(), "text/xml"))],
        headers=A,
    )
    assert upload.status_code == 200 and upload.json()["written"] == [
        "10.1371/journal.pcbi.1004082"
    ]
    info = http.get("/v1/documents/10.1371/journal.pcbi.1004082", headers=A).json()
    hit = http.get("/v1/search", params={"q": info["title"], "top_k": 5}, headers=A).json()[
        "results"
    ]
    assert any(r["doc_id"] == info["id"] and r["metadata"]["doi"] == info["id"] for r in hit)

    again = http.post("/v1/documents", json={"documents": corpus}, headers=A).json()
    assert again["written"] == [] and len(again["unchanged"]) == len(corpus)

    deleted = http.delete(f"/v1/documents/{target['id']}", headers=A)
    assert deleted.status_code == 200 and deleted.json()["chunks_removed"] >= 1
    after = http.post("/v1/search", json={"query": target["title"], "top_k": 10}, headers=A).json()
    assert target["id"] not in {r["doc_id"] for r in after["results"]}
    restored = http.post("/v1/documents", json={"documents": [target]}, headers=A).json()
    assert restored["written"] == [target["id"]]
    chunk_ids = http.get(f"/v1/documents/{target['id']}", headers=A).json()["chunk_ids"]
    assert len(chunk_ids) == len(set(chunk_ids)) >= 1


def test_tenant_isolation(http, ingested, corpus):
    own = {"documents": [{"id": "b-only", "text": "Tenant B studies axolotl limb regeneration."}]}
    assert http.post("/v1/documents", json=own, headers=B).status_code == 200
    seen_by_a = http.post(
        "/v1/search", json={"query": "axolotl limb regeneration"}, headers=A
    ).json()
    assert "b-only" not in {r["doc_id"] for r in seen_by_a["results"]}
    assert http.get("/v1/documents/b-only", headers=A).status_code == 404
    assert http.delete("/v1/documents/b-only", headers=A).status_code == 404
    assert http.get("/v1/documents/b-only", headers=B).status_code == 200
    seen_by_b = http.post("/v1/search", json={"query": corpus[0]["title"]}, headers=B).json()
    assert corpus[0]["id"] not in {r["doc_id"] for r in seen_by_b["results"]}


@pytest.mark.parametrize(
    "method,path,kwargs,status,code",
    [
        ("post", "/v1/search", {"json": {"query": ""}, "headers": A}, 422, "INVALID_INPUT"),
        (
            "post",
            "/v1/documents",
            {"files": [("files", ("x.docx", b"PK\x03\x04", "application/zip"))], "headers": A},
            400,
            "INVALID_INPUT",
        ),
        ("post", "/v1/search", {"json": {"query": "x"}}, 401, "UNAUTHENTICATED"),
        (
            "post",
            "/v1/documents",
            {"json": {"documents": [{"id": "r", "text": "t"}]}, "headers": READ_ONLY},
            403,
            "FORBIDDEN",
        ),
        ("get", "/v1/documents/no-such-doc", {"headers": A}, 404, "NOT_FOUND"),
        (
            "post",
            "/v1/documents",
            {"content": b"x" * 3_100_000, "headers": {**A, "content-type": "application/json"}},
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        (
            "post",
            "/v1/search",
            {"json": {"query": "cells"}, "headers": {**A, "X-Request-Timeout-Ms": "1"}},
            504,
            "TIMEOUT",
        ),
    ],
)
def test_error_codes(http, method, path, kwargs, status, code):
    response = getattr(http, method)(path, **kwargs)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["request_id"] == response.headers["x-request-id"]


async def test_same_results_as_the_in_process_pipeline(http, corpus, app_config_factory):
    """The same documents through both paths (tenant-c holds exactly these) rank the same."""
    C = {"X-API-Key": "key-c"}
    assert http.post("/v1/documents", json={"documents": corpus}, headers=C).status_code == 200
    components = await build_components(app_config_factory())
    try:
        documents = [Document(**d) for d in corpus]
        await IngestPipeline(components).ingest(ScopeKey("tenant-c"), documents)
        search = SearchPipeline(components)
        for query in (
            "vitamin D and bone density",
            "gene expression in tumour cells",
            corpus[7]["title"],
        ):
            local = await search.search(SearchRequest(query=query, top_k=10), ScopeKey("tenant-c"))
            served = http.post("/v1/search", json={"query": query, "top_k": 10}, headers=C).json()
            assert [r.chunk.id for r in local.results] == [r["chunk_id"] for r in served["results"]]
            for mine, theirs in zip(local.results, served["results"], strict=True):
                assert mine.score == pytest.approx(theirs["score"], rel=1e-4)
    finally:
        await components.close()


def _store_replicas() -> dict[str, str]:
    """Name -> namespace of every store replica actor alive."""
    import ray

    return {
        a["name"]: a["namespace"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if "#store#" in a["name"] and a["name"].startswith("SERVE_REPLICA")
    }


def test_store_outage_ends_each_search_within_its_deadline_then_recovers(http, ingested):
    import ray

    assert http.get("/readyz").status_code == 200
    ((killed, namespace),) = _store_replicas().items()
    ray.kill(ray.get_actor(killed, namespace=namespace), no_restart=True)

    # Searches run through the whole outage, until Serve's replacement replica serves. Each
    # ends within its deadline with a result (Serve held it and routed it to the new replica)
    # or a stable code: 503 when the call reached the dead replica, 504 when the replacement
    # took longer than the deadline. Which of the three happens depends on how fast the new
    # replica starts (the mapping of each Ray error is tests/deployments/replicas/test_handle_errors.py).
    outcomes: list[tuple[int, str, float]] = []
    deadline = time.time() + 90
    replaced = False
    while time.time() < deadline and not replaced:
        started = time.monotonic()
        response = http.post(
            "/v1/search", json={"query": "cells"}, headers={**A, "X-Request-Timeout-Ms": "5000"}
        )
        code = "" if response.status_code == 200 else response.json()["error"]["code"]
        outcomes.append((response.status_code, code, time.monotonic() - started))
        replaced = (
            bool(_store_replicas().keys() - {killed}) and http.get("/readyz").status_code == 200
        )
        time.sleep(0.2)
    assert replaced, "no store replica replaced the killed one within 90 s"
    for status, code, took in outcomes:
        assert (status, code) in {(200, ""), (503, "SERVICE_UNAVAILABLE"), (504, "TIMEOUT")}
        assert took < 10, f"a search took {took:.1f}s during the outage, past its 5 s deadline"
    assert http.post("/v1/search", json={"query": "cells"}, headers=A).status_code == 200


async def test_concurrent_searches_share_batches_but_keep_their_own_results(
    serve_url, ingested, corpus
):
    """The ingress coalesces concurrent queries into shared model and store calls: every
    answer must still be the one the same query gets alone, tenant and filters included."""
    requests = [
        ({"query": row["title"], "top_k": 5}, A if i % 3 else B)
        for i, row in enumerate(corpus[:12])
    ]
    requests.append(
        ({"query": corpus[0]["title"], "top_k": 5, "filters": {"doc_ids": [corpus[1]["id"]]}}, A)
    )

    def ranking(body: dict) -> list[tuple[str, float]]:
        return [(r["chunk_id"], round(r["fused_score"], 5)) for r in body["results"]]

    async with httpx.AsyncClient(base_url=serve_url, timeout=120) as client:
        alone = []
        for body, who in requests:
            response = await client.post("/v1/search", json=body, headers=who)
            assert response.status_code == 200, response.text
            alone.append(ranking(response.json()))
        together = await asyncio.gather(
            *(client.post("/v1/search", json=body, headers=who) for body, who in requests)
        )
    assert [ranking(r.json()) for r in together] == alone
    theirs = {row["id"] for row in corpus}  # tenant A's documents
    assert all(
        r["doc_id"] not in theirs
        for response, (_, who) in zip(together, requests, strict=True)
        if who is B
        for r in response.json()["results"]
    )
    assert {r["doc_id"] for r in together[-1].json()["results"]} == {corpus[1]["id"]}


def send_chunked_until_answered(url: str, path: str, headers: dict, total: int) -> tuple[int, int]:
    """POST ``total`` bytes with Transfer-Encoding: chunked over a raw socket, 64 KiB a chunk,
    stopping as soon as the server answers: (status, bytes sent before the answer)."""
    import select
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
    head = [f"POST {path} HTTP/1.1", f"Host: {parts.hostname}", "Transfer-Encoding: chunked"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    chunk = b"x" * 65_536
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    sent = 0
    try:
        while sent < total:
            readable, writable, _ = select.select([sock], [sock], [], 30)
            if readable:
                break
            if writable:
                sock.sendall(framed)
                sent += len(chunk)
        answer = sock.recv(4096).decode("latin-1")
    except (BrokenPipeError, ConnectionResetError):
        answer = sock.recv(4096).decode("latin-1")
    finally:
        sock.close()
    return int(answer.split(" ", 2)[1]), sent


@pytest.mark.parametrize("path", ["/v1/search", "/v1/documents"])
def test_chunked_oversize_body_is_cut_at_the_limit_through_serve(serve_url, path):
    """Through the real Serve proxy: a 100 MB chunked body (no Content-Length) over the 3 MB
    limit is answered 413 long before the client finishes sending it."""
    headers = {**A, "Content-Type": "application/json"}
    status, sent = send_chunked_until_answered(serve_url, path, headers, 100_000_000)
    assert status == 413
    assert sent < 30_000_000, f"{sent} bytes went in before the answer"


def test_unauthenticated_body_is_refused_before_it_is_read_through_serve(serve_url):
    status, sent = send_chunked_until_answered(
        serve_url, "/v1/search", {"Content-Type": "application/json"}, 100_000_000
    )
    assert status == 401
    assert sent < 30_000_000


def test_named_collections_through_serve(http):
    """Collections over the real Serve graph (the store deployment forwards the collection
    calls): scoped ingest and search, invisible to tenant B, gone with the delete."""
    name = f"e2e-{int(time.time() * 1000) % 10**9}"
    created = http.post("/v1/collections", json={"name": name}, headers=A)
    assert created.status_code == 201, created.text
    doc = {"id": "phage", "text": "Bacteriophages infect bacteria and inject their genome."}
    put = http.post(f"/v1/collections/{name}/documents", json={"documents": [doc]}, headers=A)
    assert put.status_code == 200 and put.json()["written"] == ["phage"], put.text
    found = http.post(f"/v1/collections/{name}/search", json={"query": "phage genome"}, headers=A)
    assert found.status_code == 200
    assert [r["doc_id"] for r in found.json()["results"]][:1] == ["phage"]
    # Not in the default collection, and not there at all for tenant B.
    default = http.post("/v1/search", json={"query": "bacteriophages inject"}, headers=A)
    assert "phage" not in [r["doc_id"] for r in default.json()["results"]]
    assert http.get(f"/v1/collections/{name}", headers=B).status_code == 404
    theirs = http.post(f"/v1/collections/{name}/search", json={"query": "phage"}, headers=B)
    assert theirs.status_code == 404
    deleted = http.delete(f"/v1/collections/{name}", headers=A)
    assert deleted.status_code == 200 and deleted.json()["chunks_removed"] >= 1, deleted.text
    assert http.get(f"/v1/collections/{name}", headers=A).status_code == 404


def test_api_metrics_are_exported_by_ray_for_every_replica(http, ingested):
    """The ingress records the API's metrics through Ray's metrics, tagged with the replica;
    Ray's node exporter (port 8080 in the chart, scraped on every pod) serves them. A local
    run's /metrics serves that export (every replica's counts); in a cluster it names the
    port instead of showing one replica's counts."""
    for _ in range(3):
        echoed = http.post(
            "/v1/search", json={"query": "metrics please"}, headers={**A, "X-Request-ID": "e2e-42"}
        )
        assert echoed.status_code == 200 and echoed.headers["x-request-id"] == "e2e-42"
    assert "x-request-id" in http.get("/healthz").headers
    local = http.get("/metrics")
    assert local.status_code == 200 and 'deployment="ingress"' in local.text

    # And every series the chart's alerting rules read (tests/helm/test_monitoring.py): a rule
    # over a name nothing exports would never fire.
    rule_names = rule_metric_names(objects(str(HELM), CHART, None, *MONITORING))
    # The searches above, not only the fixture's uploads: the agent exports every few seconds.
    wanted = ["serve_app_requests", 'endpoint="/v1/search"', "serve_app_model_batch_size"]
    lines = ray_metrics([*wanted, *rule_names])
    exported = {line.split("{")[0].split(" ")[0] for line in lines}
    assert rule_names <= exported, sorted(rule_names - exported)

    def series(name: str, *labels: str) -> list[str]:
        return metric_lines(lines, name, *labels)

    requests = series("serve_app_requests", 'endpoint="/v1/search"', 'status="200"')
    assert requests and all('deployment="ingress"' in line for line in requests), lines[-40:]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in requests) >= 3
    assert series("serve_app_stage_latency_seconds_count", 'stage="encode.dense"')
    assert series("serve_app_stage_latency_seconds_count", 'stage="retrieve"')
    assert series("serve_app_model_batch_size_count", 'model="dense"')


def test_the_ingress_calls_every_deployment_over_the_configured_transport(serve_url, serve_config):
    """Serve's throughput mode (gRPC between replicas) is the configuration's default:
    config/local.yaml names no transport switch. This test process imported Ray Serve before
    the local run set that switch, so the handles it built default to Ray actor calls; the
    ingress replica applies its own environment, and a search works over what it chose."""
    from ray import serve

    settings = service_config(serve_config).serve
    assert settings.env.get("RAY_SERVE_THROUGHPUT_OPTIMIZED") == "1"
    builder_default = "actor" if DynamicHandleOptions()._by_reference else "grpc"
    ingress = serve.get_app_handle(settings.app_name)
    transports = ingress.transports.remote().result(timeout_s=30)
    assert transports == dict.fromkeys(("chunker", "dense", "splade", "store", "llm"), "grpc"), (
        f"the ingress chose {transports}; this process's handles default to {builder_default}"
    )
    found = httpx.post(f"{serve_url}/v1/search", json={"query": "transport"}, headers=A)
    assert found.status_code == 200, found.text
