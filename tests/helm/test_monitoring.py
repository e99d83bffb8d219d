"""What the chart gives Prometheus: every Ray pod's exporter and the head's autoscaler and
dashboard exporters on the ports Ray itself opens, and alerting rules over metric names that
exist (an alert on a name nothing exports never fires: tests/e2e/test_serve_app.py checks each
name here against a real Ray node's /metrics)."""

from __future__ import annotations

import re

import yaml

from tests.helm.test_chart import CHART, HELM, objects, rayservice
from tests.helm.test_network_policy import NAMESPACE

MONITORING = ("--set", "podMonitor.enabled=true", "--set", "prometheusRule.enabled=true")


def rule_metric_names(docs: list[dict], prefix: str = "ray_") -> set[str]:
    """The metric names starting with ``prefix`` that the PrometheusRule's expressions read
    (``ray_``: the Ray node's export; ``autoscaler_``: the autoscaler's)."""
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    exprs = [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]
    pattern = rf"\b({re.escape(prefix)}[a-z_]+)\{{"
    return {name for expr in exprs for name in re.findall(pattern, expr)}


def test_the_head_exports_the_autoscaler_and_dashboard_on_rays_ports():
    from ray.autoscaler._private.constants import AUTOSCALER_METRIC_PORT
    from ray.dashboard.consts import DASHBOARD_METRIC_PORT

    docs = objects(str(HELM), CHART, None, *MONITORING)
    head = rayservice(docs)["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    ports = {p["name"]: p["containerPort"] for p in head["containers"][0]["ports"]}
    assert ports["as-metrics"] == AUTOSCALER_METRIC_PORT
    assert ports["dash-metrics"] == DASHBOARD_METRIC_PORT
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    scraped = {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]}
    assert scraped == {"metrics", "as-metrics", "dash-metrics"}
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["podMetricsEndpoints"])


def test_the_rules_watch_this_releases_pods_at_the_configured_thresholds():
    docs = objects(
        str(HELM), CHART, None, *MONITORING,
        "--set", "prometheusRule.searchP95Seconds=0.3", "--set", "prometheusRule.for=15m",
        "--set", "prometheusRule.labels.release=kube-prometheus-stack",
    )  # fmt: skip
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    rules = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert set(rules) == {
        "ServeAppSearchLatencyHigh",
        "ServeAppErrorsHigh",
        "ServeAppReplicaUnhealthy",
        "ServeAppNodesPending",
        "ServeAppGpuGroupEmpty",
    }
    # The GPU groups with a pod at minimum: without the LLM its group keeps none.
    assert 'NodeType=~"dense-gpu|sparse-gpu|llm-gpu"' in rules["ServeAppGpuGroupEmpty"]["expr"]
    no_llm = objects(str(HELM), CHART, None, *MONITORING, "--set", "config.llm.enabled=false")
    (no_llm_rule,) = [d for d in no_llm if d["kind"] == "PrometheusRule"]
    (empty,) = [r for r in no_llm_rule["spec"]["groups"][0]["rules"] if "GpuGroup" in r["alert"]]
    assert 'NodeType=~"dense-gpu|sparse-gpu"' in empty["expr"]
    latency = rules["ServeAppSearchLatencyHigh"]
    assert latency["for"] == "15m" and latency["expr"].strip().endswith("> 0.3")
    for r in rules.values():  # every series selector names this release's pods
        selectors = re.findall(r"\b(?:ray|autoscaler)_[a-z_]+\{([^}]*)\}", r["expr"])
        assert selectors, r["alert"]
        for selector in selectors:
            assert f'namespace="{NAMESPACE}"' in selector and 'pod=~"rel-serve-app-.*"' in selector
    assert rule_metric_names(docs) == {
        "ray_serve_app_request_latency_seconds_bucket",
        "ray_serve_app_requests_total",
        "ray_serve_deployment_replica_healthy",
    }
    # The annotation's template survives Helm for Prometheus to fill in.
    assert "{{ $labels.deployment }}" in rules["ServeAppReplicaUnhealthy"]["annotations"]["summary"]
    assert not [d for d in objects(str(HELM), CHART, None) if d["kind"] == "PrometheusRule"]
    assert yaml.safe_dump(rule)  # plain data


def test_the_autoscaler_rules_read_names_rays_autoscaler_exports():
    """Ray's autoscaler exports its own registry (port 44217), not through the node's agent:
    its metric objects, as Ray builds them, name what the rules read."""
    from prometheus_client import generate_latest
    from ray.autoscaler._private.prom_metrics import AutoscalerPrometheusMetrics

    metrics = AutoscalerPrometheusMetrics(session_name="s")
    metrics.pending_nodes.labels(NodeType="dense-gpu", SessionName="s").set(1)
    metrics.active_nodes.labels(NodeType="dense-gpu", SessionName="s").set(0)
    exported = {
        line.split("{")[0]
        for line in generate_latest(metrics.registry).decode().splitlines()
        if not line.startswith("#")
    }
    names = rule_metric_names(objects(str(HELM), CHART, None, *MONITORING), "autoscaler_")
    assert names == {"autoscaler_pending_nodes", "autoscaler_active_nodes"}
    assert names <= exported, sorted(names - exported)
