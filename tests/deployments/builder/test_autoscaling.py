"""What query load alone makes Ray Serve's autoscaler do to the GPU model deployments,
computed with Serve's own policy code on the production Serve config
(deployments/serve_configs/gpu.yaml).

The ingress coalesces its concurrent queries: each ingress replica keeps at most
``serve.batching.calls_in_flight`` calls in flight per model, and a call is a batch. So the
ongoing requests a model deployment sees from searches are capped at calls_in_flight x ingress
replicas however heavy the traffic, and Serve's default policy (ongoing / target per replica)
scales the model from that. The model's ceiling must be reachable that way once the ingress
has scaled out; a smaller calls_in_flight (tried for CPU throughput) or a larger target would leave
GPU replicas that searches can never call for."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from ray.serve import autoscaling_policy
from ray.serve._private.autoscaling_state import _resolve_policy_callable
from ray.serve._private.common import DeploymentID
from ray.serve._private.constants import CONTROL_LOOP_INTERVAL_S
from ray.serve.autoscaling_policy import _apply_autoscaling_config
from ray.serve.config import AutoscalingConfig, AutoscalingContext

from deployments.settings import load_service_config

ROOT = Path(__file__).resolve().parents[3]
GPU = load_service_config(ROOT / "config" / "gpu.yaml", environ={})
IN_FLIGHT = GPU.serve.batching.calls_in_flight
COALESCED = ("dense", "splade", "reranker")  # the deployments searches call through coalescers


def gpu_deployments() -> dict[str, dict]:
    document = yaml.safe_load((ROOT / "deployments" / "serve_configs" / "gpu.yaml").read_text())
    return {d["name"]: d for d in document["applications"][0]["deployments"]}


def settled_replicas(
    config: AutoscalingConfig, ongoing: float, seconds: float, monkeypatch: pytest.MonkeyPatch
) -> int:
    """Replicas after ``seconds`` of the controller's loop with ``ongoing`` requests held,
    from ``min_replicas``: the controller's own wrapping of the policy (scaling factors,
    up/downscale delays, which read the wall clock: simulated here), its rounding, then the
    deployment's bounds."""
    policy = _apply_autoscaling_config(_resolve_policy_callable(config.policy))
    replicas, state, now = config.min_replicas, {}, 0.0
    monkeypatch.setattr(autoscaling_policy, "time", SimpleNamespace(time=lambda: now))
    for _ in range(math.ceil(seconds / CONTROL_LOOP_INTERVAL_S)):
        context = AutoscalingContext(
            deployment_id=DeploymentID(name="model", app_name="retrieval"),
            deployment_name="model",
            app_name="retrieval",
            current_num_replicas=replicas,
            target_num_replicas=replicas,
            running_replicas=[],
            total_num_requests=ongoing,
            total_queued_requests=0.0,
            aggregated_metrics={},
            raw_metrics={},
            capacity_adjusted_min_replicas=config.min_replicas,
            capacity_adjusted_max_replicas=config.max_replicas,
            policy_state=state,
            last_scale_up_time=None,
            last_scale_down_time=None,
            current_time=now,
            config=config,
        )
        decided, state = policy(context)
        replicas = min(max(math.ceil(decided), config.min_replicas), config.max_replicas)
        now += CONTROL_LOOP_INTERVAL_S
    return replicas


@pytest.mark.parametrize("model", COALESCED)
def test_searches_alone_can_scale_each_gpu_model_to_its_ceiling(model, monkeypatch):
    deployments = gpu_deployments()
    ingress = AutoscalingConfig(**deployments["ingress"]["autoscaling_config"])
    config = AutoscalingConfig(**deployments[model]["autoscaling_config"])
    wait_s = config.upscale_delay_s * 3 + 10  # scale-ups take a delay each

    at_ceiling = settled_replicas(config, IN_FLIGHT * ingress.max_replicas, wait_s, monkeypatch)
    assert at_ceiling == config.max_replicas, (
        f"{model}: {IN_FLIGHT} calls in flight x {ingress.max_replicas} ingress replicas "
        f"settle at {at_ceiling} of {config.max_replicas} replicas"
    )
    # With the ingress at its floor the same traffic holds the model at fewer replicas:
    # searches scale the models through the ingress, whose own target is HTTP requests.
    at_floor = settled_replicas(config, IN_FLIGHT * ingress.min_replicas, wait_s, monkeypatch)
    assert at_floor == math.ceil(
        IN_FLIGHT * ingress.min_replicas / config.target_ongoing_requests
    ), at_floor
    # The calls the ingress can send at its ceiling fit the replicas they scaled to.
    per_replica = IN_FLIGHT * ingress.max_replicas / config.max_replicas
    assert per_replica <= deployments[model]["max_ongoing_requests"]
