from serve_app.api.observability import Metrics


def test_model_batch_metrics():
    metrics = Metrics()
    metrics.observe_batch(
        "dense", {"batch_size": 12, "tokens": 900, "padding_ratio": 0.125, "queue_s": 0.003}
    )
    metrics.observe_batch("reranker", {"batch_size": 3, "padding_ratio": 0.0, "queue_s": 0.0})
    text = metrics.render().decode()
    assert 'serve_app_model_batch_size_sum{model="dense"} 12.0' in text
    assert 'serve_app_model_batch_tokens_sum{model="dense"} 900.0' in text
    assert 'serve_app_model_padding_ratio_sum{model="dense"} 0.125' in text
    assert 'serve_app_model_queue_seconds_sum{model="dense"} 0.003' in text
    # a backend that does not count tokens (vLLM scoring) reports no token sample
    assert 'serve_app_model_batch_tokens_count{model="reranker"}' not in text


class _Exported:
    """What a Ray Serve replica's metrics look like: recorded through Ray, nothing local."""

    def __getattr__(self, name: str):  # counters and histograms that record nothing here
        return lambda *args, **kwargs: self

    def render(self) -> None:
        return None


async def _metrics_answer(monkeypatch, exported_url: str | None):
    import httpx

    from serve_app.api.app import create_app
    from serve_app.api.observability import METRICS_URL_ENV
    from serve_app.config import load_config
    from serve_app.service import RetrievalService

    if exported_url is None:
        monkeypatch.delenv(METRICS_URL_ENV, raising=False)
    else:
        monkeypatch.setenv(METRICS_URL_ENV, exported_url)
    service = RetrievalService.__new__(RetrievalService)
    service.config = load_config("config/local.yaml", environ={})
    app = create_app(service, Metrics(_Exported()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        return await c.get("/metrics")


async def test_metrics_exported_through_ray_are_served_in_a_local_run_or_named(monkeypatch):
    import http.server
    import threading

    class Export(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'serve_app_requests_total{deployment="ingress"} 3.0\n'
            self.send_response(200)
            self.send_header("content-type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Export)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        served = await _metrics_answer(monkeypatch, url)
        assert served.status_code == 200 and 'deployment="ingress"' in served.text
    finally:
        server.shutdown()
    named = await _metrics_answer(monkeypatch, None)
    assert named.status_code == 404 and "8080" in named.json()["error"]["message"]
    gone = await _metrics_answer(monkeypatch, url)  # the export stopped answering
    assert gone.status_code == 503 and url in gone.json()["error"]["message"]
