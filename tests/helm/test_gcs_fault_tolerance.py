"""GCS fault tolerance (external Redis) as a values option: KubeRay v1.7's
gcsFaultToleranceOptions in the rendered RayService, validated against the v1.7.0 CRD schema
and accepted by Ray's own autoscaler derivation, for every values file with it on and off.
The head's disruption budget (test_disruption.py) and its Redis egress
(test_network_policy.py) follow the same switch."""

from __future__ import annotations

import kubernetes_validate
import pytest
from ray.autoscaler._private.kuberay.autoscaling_config import (
    _derive_autoscaling_config_from_ray_cr,
)

from tests.helm.test_chart import (
    CHART,
    HELM,
    K8S_VERSION,
    VALUES,
    objects,
    validate_rayservice,
)
from tests.helm.test_chart import render as render_raw
from tests.helm.test_ray_cluster import as_raycluster

REDIS = "redis-master.redis.svc:6379"
FT_ON = (
    "--set", "gcsFaultTolerance.enabled=true",
    "--set", f"gcsFaultTolerance.redisAddress={REDIS}",
    "--set", "gcsFaultTolerance.redisPasswordSecret.name=redis",
    "--set", "gcsFaultTolerance.redisPasswordSecret.key=redis-password",
)  # fmt: skip
FT_OFF = ("--set", "gcsFaultTolerance.enabled=false")
IDS = [v or "defaults" for v in VALUES]


def render(values: str | None, *extra: str) -> list[dict]:
    return objects(str(HELM), CHART, values, *extra)


def rayservice(docs: list[dict]) -> dict:
    (found,) = [d for d in docs if d["kind"] == "RayService"]
    return found


@pytest.mark.parametrize("values", VALUES, ids=IDS)
def test_on_renders_the_options_with_the_password_from_a_secret(values):
    docs = render(values, *FT_ON)
    service = rayservice(docs)
    cluster = service["spec"]["rayClusterConfig"]
    assert cluster["gcsFaultToleranceOptions"] == {
        "redisAddress": REDIS,
        "redisPassword": {
            "valueFrom": {"secretKeyRef": {"name": "redis", "key": "redis-password"}}
        },
    }  # no externalStorageNamespace: KubeRay takes each RayCluster's UID
    # KubeRay refuses the options together with Redis settings of its older interfaces.
    head = cluster["headGroupSpec"]
    assert not {"redis-password", "redis-username"} & set(head["rayStartParams"])
    assert "ray.io/ft-enabled" not in (service["metadata"].get("annotations") or {})
    env = {e["name"] for e in head["template"]["spec"]["containers"][0]["env"]}
    assert not {"RAY_REDIS_ADDRESS", "REDIS_PASSWORD", "RAY_external_storage_namespace"} & env
    validate_rayservice(service)
    for doc in docs:
        if not doc["apiVersion"].startswith(("ray.io/", "monitoring.coreos.com/")):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    _derive_autoscaling_config_from_ray_cr(as_raycluster(service))  # the autoscaler still reads it


@pytest.mark.parametrize("values", VALUES, ids=IDS)
def test_off_renders_none(values):
    """Off (gpu-production turns it on: its head may then be drained), nothing of it."""
    cluster = rayservice(render(values, *FT_OFF))["spec"]["rayClusterConfig"]
    assert "gcsFaultToleranceOptions" not in cluster


def test_no_password_secret_and_a_namespace_with_in_place_upgrades():
    """No Secret named: no password. A fixed namespace is allowed where the RayCluster is
    never replaced by an upgrade (the embedded store's upgradeStrategy None)."""
    docs = render(
        None,
        "--set", "gcsFaultTolerance.enabled=true",
        "--set", "gcsFaultTolerance.redisAddress=rediss://redis.example.com:6380",
        "--set", "gcsFaultTolerance.externalStorageNamespace=serve-app",
    )  # fmt: skip
    service = rayservice(docs)
    assert service["spec"]["upgradeStrategy"]["type"] == "None"
    assert service["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"] == {
        "redisAddress": "rediss://redis.example.com:6380",
        "externalStorageNamespace": "serve-app",
    }
    validate_rayservice(service)


@pytest.mark.parametrize(
    "values,extra,message",
    [
        (None, ("--set", "gcsFaultTolerance.enabled=true"), "redisAddress"),
        (
            "ci/external-stores.yaml",
            (*FT_ON, "--set", "gcsFaultTolerance.externalStorageNamespace=fixed"),
            "share one Redis namespace",
        ),
        (None, (*FT_ON, "--set", "gcsFaultTolerance.redisPasswordSecret.key="), "key"),
    ],
    ids=["no address", "fixed namespace with NewCluster", "no key"],
)
def test_bad_settings_are_refused(values, extra, message):
    result = render_raw(str(HELM), CHART, values, *extra)
    assert result.returncode != 0 and message in result.stderr, result.stderr
