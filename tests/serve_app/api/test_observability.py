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
