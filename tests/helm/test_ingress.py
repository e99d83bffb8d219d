"""The Ingress lets through what the API accepts: ingress-nginx's defaults (a 1 MiB body,
60 s read/send timeouts) would answer 413/504 for uploads and ingests the API serves."""

from __future__ import annotations

import pytest
import yaml

from serve_app.config import config_from_dict
from tests.helm.test_chart import CHART, HELM, objects

NGINX = "nginx.ingress.kubernetes.io/"


def ingress(values: str | None, *sets: str) -> dict:
    docs = objects(str(HELM), CHART, values, "--set", "ingress.enabled=true", *sets)
    (found,) = [d for d in docs if d["kind"] == "Ingress"]
    return found


def app_api(values: str | None, *sets: str):
    docs = objects(str(HELM), CHART, values, *sets)
    (rayservice,) = [d for d in docs if d["kind"] == "RayService"]
    (application,) = yaml.safe_load(rayservice["spec"]["serveConfigV2"])["applications"]
    return config_from_dict(application["args"]["config"], "chart").api


@pytest.mark.parametrize("values", [None, "ci/gpu-production.yaml"])
def test_nginx_limits_follow_the_api_limits(values):
    sets = ("--set", "ingress.className=nginx")
    annotations = ingress(values, *sets)["metadata"]["annotations"]
    api = app_api(values, *sets)
    assert int(annotations[NGINX + "proxy-body-size"]) == api.max_request_bytes
    longest = max(api.ingest_timeout_s, api.request_timeout_s)
    assert int(annotations[NGINX + "proxy-read-timeout"]) > longest
    assert int(annotations[NGINX + "proxy-send-timeout"]) > longest
    assert annotations[NGINX + "proxy-request-buffering"] == "off"


def test_changed_api_limits_move_the_proxy_limits():
    sets = (
        "--set",
        "ingress.className=nginx",
        "--set",
        "config.api.max_request_bytes=1000000",
        "--set",
        "config.api.ingest_timeout_s=120",
        "--set",
        "config.answer.deadlines.total_s=60",
    )
    annotations = ingress(None, *sets)["metadata"]["annotations"]
    assert annotations[NGINX + "proxy-body-size"] == "1000000"
    assert annotations[NGINX + "proxy-read-timeout"] == "150"
    assert annotations[NGINX + "proxy-buffering"] == "off"  # answers stream as written
    longer = ingress(None, *sets[:-1], "config.answer.deadlines.total_s=600")
    assert longer["metadata"]["annotations"][NGINX + "proxy-read-timeout"] == "630"


def test_values_annotations_win_and_other_controllers_get_none():
    mine = ingress(
        None,
        "--set",
        "ingress.className=nginx",
        "--set-string",
        "ingress.annotations.nginx\\.ingress\\.kubernetes\\.io/proxy-body-size=10m",
    )["metadata"]["annotations"]
    assert mine[NGINX + "proxy-body-size"] == "10m"
    assert NGINX + "proxy-read-timeout" in mine
    other = ingress(None, "--set", "ingress.className=traefik")["metadata"]
    assert "annotations" not in other
