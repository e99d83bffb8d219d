"""An upload outlives every drain of the cluster the chart starts, and fits through its
transport, judged with Ray's own code.

An upload may run ``api.ingest_timeout_s`` inside the ingress. Three things can end it early:
Serve stopping its ingress replica (scale-down, redeploy: Serve kills the replica at its
``graceful_shutdown_timeout_s``, after Ray's direct-ingress draining window has been spent), the
old HAProxy process of a reload (hard-stopped ``RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S`` after it),
and KubeRay deleting the old cluster of a NewCluster upgrade (``rayClusterDeletionDelaySeconds``).
Ray's values are read from Ray's own ``serve._private.constants`` under the environment each of
the chart's Ray containers gets, and the ingress options through Serve's own config schema, so a
chart env override or a new Ray default is caught here. The local behaviour (an upload through
HAProxy surviving its ingress replica's replacement) is tests/e2e/test_ingress_drain.py.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from typing import Any

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from serve_app.config import config_from_dict
from tests.helm.test_chart import CHART, HELM, VALUES, objects, rayservice

RAY_CONSTANTS = """
import json
from ray._private import ray_constants as rc
from ray.serve._private import constants as c
print(json.dumps({
    "sigterm_drain_s": rc.RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S,
    "ha_proxy": c.RAY_SERVE_ENABLE_HA_PROXY,
    "direct_ingress": c.RAY_SERVE_ENABLE_DIRECT_INGRESS,
    "draining_s": c.RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S,
    "hard_stop_after_s": c.RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S,
    "grpc_between_replicas": c.RAY_SERVE_USE_GRPC_BY_DEFAULT,
    "grpc_max_message_bytes": c.RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH,
}))
"""


def ray_constants(env: dict[str, str]) -> dict:
    """Serve's constants as a Ray process started with ``env`` reads them."""
    return dict(_ray_constants(tuple(sorted(env.items()))))


@functools.cache  # one fresh interpreter per distinct environment
def _ray_constants(env: tuple[tuple[str, str], ...]) -> tuple[tuple[str, Any], ...]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    result = subprocess.run(
        [sys.executable, "-c", RAY_CONSTANTS],
        env={**base, **dict(env)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return tuple(json.loads(result.stdout.splitlines()[-1]).items())


def ray_containers(spec: dict) -> list[dict]:
    cluster = spec["rayClusterConfig"]
    groups = [cluster["headGroupSpec"], *cluster.get("workerGroupSpecs", [])]
    return [group["template"]["spec"]["containers"][0] for group in groups]


def ray_environments(spec: dict) -> list[dict]:
    """Serve's constants under each distinct environment of the chart's Ray containers."""
    environments = {
        json.dumps({e["name"]: e["value"] for e in c["env"] if "value" in e}, sort_keys=True)
        for c in ray_containers(spec)
    }
    return [ray_constants(json.loads(environment)) for environment in environments]


@pytest.mark.parametrize("values", VALUES)
def test_an_upload_outlives_every_drain_of_the_cluster(values):
    spec = rayservice(objects(str(HELM), CHART, values))["spec"]
    serve = ServeDeploySchema.model_validate(yaml.safe_load(spec["serveConfigV2"]))
    (application,) = serve.applications
    ingest_s = config_from_dict(application.args["config"], "chart").api.ingest_timeout_s
    (ingress,) = [d for d in application.deployments if d.name == "ingress"]
    stop_s = ingress.graceful_shutdown_timeout_s
    assert isinstance(stop_s, float), "the ingress must set graceful_shutdown_timeout_s"

    for ray in ray_environments(spec):
        # The drain read in Ray's replica.py applies: HAProxy forwarding to the ingress.
        assert ray["ha_proxy"] and ray["direct_ingress"], ray
        assert stop_s >= ray["draining_s"] + ingest_s, (stop_s, ray)
        assert ray["hard_stop_after_s"] >= ingest_s, ray
    assert spec["rayClusterDeletionDelaySeconds"] >= stop_s


@pytest.mark.parametrize("values", VALUES)
def test_a_whole_document_fits_in_one_message_between_replicas(values):
    """Serve's throughput mode sends calls between replicas over gRPC, whose messages Ray caps
    at ``RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH`` (gRPC's 4 MB unless set). The chunker call
    carries one upload sub-batch, or one document whole when it is larger: up to
    ``limits.max_document_chars`` characters, 4 bytes each at most in UTF-8. Behaviour through a
    real local Serve: tests/deployments/replicas/test_large_upload.py."""
    spec = rayservice(objects(str(HELM), CHART, values))["spec"]
    serve = ServeDeploySchema.model_validate(yaml.safe_load(spec["serveConfigV2"]))
    (application,) = serve.applications
    config = config_from_dict(application.args["config"], "chart")
    largest = 4 * max(config.limits.max_document_chars, config.api.ingest_batch_chars)
    for ray in ray_environments(spec):
        assert ray["grpc_between_replicas"], ray  # the transport the chart asks for
        assert ray["grpc_max_message_bytes"] >= largest, (ray, largest)


@pytest.mark.parametrize("values", VALUES)
def test_every_ray_pod_is_given_time_to_drain_an_upload(values):
    """A Ray pod that Kubernetes stops (a node drain, a scale-down) is given, before SIGKILL,
    Ray's direct-ingress draining window plus the longest deadline the API gives a request (an
    upload's api.ingest_timeout_s), and no less than the ingress' own graceful shutdown: both
    read from the configuration the chart renders and Ray's constants under the pod's env."""
    spec = rayservice(objects(str(HELM), CHART, values))["spec"]
    serve = ServeDeploySchema.model_validate(yaml.safe_load(spec["serveConfigV2"]))
    (application,) = serve.applications
    api = config_from_dict(application.args["config"], "chart").api
    deadline_s = max(api.ingest_timeout_s, api.request_timeout_s)
    (ingress,) = [d for d in application.deployments if d.name == "ingress"]
    (ray,) = ray_environments(
        {"rayClusterConfig": {"headGroupSpec": spec["rayClusterConfig"]["headGroupSpec"]}}
    )
    cluster = spec["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        grace_s = group["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace_s >= ray["draining_s"] + deadline_s, (group.get("groupName"), grace_s)
        assert grace_s >= ingress.graceful_shutdown_timeout_s


@pytest.mark.parametrize("values", VALUES)
def test_sigterm_drains_the_node_for_as_long_as_an_upload_may_run(values):
    """On SIGTERM ``ray start --block`` drains its node for Ray's
    ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` (Ray's default 30 s) before it stops the node's
    processes: read under each Ray container's own environment, it covers the ingress'
    graceful shutdown (an upload's deadline plus Ray's draining window) and ends before the
    pod's grace period does (then SIGKILL). The behaviour on a real multi-node Ray:
    tests/e2e/test_node_sigterm_drain.py."""
    spec = rayservice(objects(str(HELM), CHART, values))["spec"]
    serve = ServeDeploySchema.model_validate(yaml.safe_load(spec["serveConfigV2"]))
    (application,) = serve.applications
    (ingress,) = [d for d in application.deployments if d.name == "ingress"]
    cluster = spec["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        container = group["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        drain_s = ray_constants(env)["sigterm_drain_s"]
        grace_s = group["template"]["spec"]["terminationGracePeriodSeconds"]
        assert ingress.graceful_shutdown_timeout_s <= drain_s < grace_s, group.get("groupName")
