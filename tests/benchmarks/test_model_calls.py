"""Queries per model call, read from the API's own metrics as exporters render them."""

from benchmarks.model_calls import per_call, read_totals
from serve_app.api.observability import Metrics

INF = float("inf")


def ray_series(series: str, value: float, **labels: str) -> str:
    """One series as Ray's metrics agent rendered it on 2026-11-26 (Ray 2.60): a ``ray_``
    prefix and Ray's own labels around the API's."""
    ray_labels = {
        "Component": "core_worker",
        "NodeAddress": "192.0.2.2",
        "application": "retrieval",
        "deployment": "ingress",
        "otel_scope_name": "ray._private.telemetry.open_telemetry_metric_recorder",
        **labels,
    }
    text = ",".join(f'{k}="{v}"' for k, v in sorted(ray_labels.items()))
    return f"ray_{series}{{{text}}} {value}"


def test_reading_of_the_apis_own_metrics():
    metrics = Metrics()
    for size in (1, 3, 4, 5):
        metrics.observe_batch("dense", {"batch_size": size})
    metrics.observe_batch("splade", {"batch_size": 13})
    for status in (200, 200, 200, 422):
        metrics.observe_request("/v1/search", "POST", status, 0.01)
    metrics.observe_request("/readyz", "GET", 200, 0.01)
    reading = read_totals(metrics.render().decode())
    assert reading["searches"] == 3
    dense = reading["models"]["dense"]
    assert dense["calls"] == 4
    assert {b: dense["buckets"][b] for b in (1.0, 2.0, 4.0, 8.0, INF)} == {
        1.0: 1,
        2.0: 1,
        4.0: 3,
        8.0: 4,
        INF: 4,
    }
    assert reading["models"]["splade"]["calls"] == 1


def test_ray_series_of_every_replica_are_summed():
    lines = ["# HELP ray_serve_app_model_batch_size Items per model batch"]
    for replica, (ones, upto_4, calls, searches) in {
        "a": (300, 450, 450, 900),
        "b": (50, 50, 50, 60),
    }.items():
        lines += [
            ray_series(
                "serve_app_model_batch_size_bucket", ones, le="1.0", model="dense", replica=replica
            ),
            ray_series(
                "serve_app_model_batch_size_bucket", ones, le="2.0", model="dense", replica=replica
            ),
            ray_series(
                "serve_app_model_batch_size_bucket",
                upto_4,
                le="4.0",
                model="dense",
                replica=replica,
            ),
            ray_series(
                "serve_app_model_batch_size_bucket",
                calls,
                le="+Inf",
                model="dense",
                replica=replica,
            ),
            ray_series("serve_app_model_batch_size_count", calls, model="dense", replica=replica),
            # Ray's sum from bucket midpoints: never read.
            ray_series("serve_app_model_batch_size_sum", 1.5, model="dense", replica=replica),
            ray_series(
                "serve_app_requests_total",
                searches,
                endpoint="/v1/search",
                method="POST",
                replica=replica,
                status="200",
            ),
        ]
    lines.append(
        ray_series("serve_app_requests_total", 7, endpoint="/readyz", method="GET", status="200")
    )
    lines.append(
        ray_series("serve_app_model_batch_size_count", 5, deployment="ingress")
    )  # no model
    reading = read_totals("\n".join(lines))
    assert reading["searches"] == 960
    assert reading["models"] == {
        "dense": {"calls": 500, "buckets": {1.0: 350, 2.0: 350, 4.0: 500, INF: 500}}
    }


def test_per_call_between_two_readings():
    before = {
        "searches": 10.0,
        "models": {
            "dense": {"calls": 10.0, "buckets": {1.0: 10.0, 2.0: 10.0, 4.0: 10.0, INF: 10.0}}
        },
    }
    after = {
        "searches": 410.0,
        "models": {
            "dense": {"calls": 110.0, "buckets": {1.0: 30.0, 2.0: 30.0, 4.0: 90.0, INF: 110.0}},
            "splade": {"calls": 50.0, "buckets": {1.0: 0.0, 8.0: 50.0, INF: 50.0}},
            "reranker": {"calls": 0.0, "buckets": {}},
        },
    }
    assert per_call(before, after) == {
        "dense": {
            "calls": 100,
            "queries_per_call": 4.0,
            "calls_by_size": {"1": 20, "3-4": 60, ">4": 20},
        },
        "splade": {"calls": 50, "queries_per_call": 8.0, "calls_by_size": {"2-8": 50}},
    }
