"""Deployment options (replicas, autoscaling, resources) from the ``serve:`` section.

Each deployment class supplies its own options (``get_deployment_options``, as Ray Serve
LLM's deployments do); the graph builder (``deployments/builder/graph.py``) binds them. An
option all deployments take is added here; one that a single deployment takes, in its own
file."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from deployments.settings import DeploymentSettings, ServiceConfig


class ConfiguredDeployment:
    """A deployment class whose options come from its entry of the ``serve:`` section."""

    settings_name: ClassVar[str]

    @classmethod
    def get_deployment_options(cls, config: ServiceConfig) -> dict[str, Any]:
        return deployment_options(getattr(config.serve, cls.settings_name))


def deployment_options(settings: DeploymentSettings) -> dict[str, Any]:
    actor: dict[str, Any] = {"num_cpus": settings.num_cpus}
    if settings.num_gpus:
        actor["num_gpus"] = settings.num_gpus
    if settings.accelerator_type:
        actor["accelerator_type"] = settings.accelerator_type
    if settings.memory_bytes:
        actor["memory"] = settings.memory_bytes
    if settings.resources:
        actor["resources"] = dict(sorted(settings.resources.items()))
    options: dict[str, Any] = {
        "ray_actor_options": actor,
        "max_ongoing_requests": settings.max_ongoing_requests,
        "health_check_period_s": 10,
        "health_check_timeout_s": 30,
        # JSON lines: a field of a request (its id, its path) cannot forge another field.
        "logging_config": {"enable_access_log": settings.access_log, "encoding": "JSON"},
    }
    for drain in ("graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s"):
        if getattr(settings, drain) is not None:  # unset: Serve's own default
            options[drain] = getattr(settings, drain)
    if settings.autoscaling is not None:
        scaling = settings.autoscaling
        options["autoscaling_config"] = {
            "min_replicas": scaling.min_replicas,
            "max_replicas": scaling.max_replicas,
            "target_ongoing_requests": scaling.target_ongoing_requests,
            "upscale_delay_s": scaling.upscale_delay_s,
            "downscale_delay_s": scaling.downscale_delay_s,
        }
    else:
        options["num_replicas"] = settings.num_replicas
    return options


def replica_bundle(actor_options: Mapping[str, Any]) -> dict[str, float]:
    """The Ray resources one replica with these ``ray_actor_options`` holds (Serve's default:
    one CPU)."""
    bundle = {"CPU": float(actor_options.get("num_cpus", 1))}
    if actor_options.get("num_gpus"):
        bundle["GPU"] = float(actor_options["num_gpus"])
    if actor_options.get("memory"):
        bundle["memory"] = float(actor_options["memory"])
    bundle.update({k: float(v) for k, v in actor_options.get("resources", {}).items()})
    if actor_options.get("accelerator_type"):
        # How Ray expresses an accelerator type: a tiny share of the node's own label resource.
        bundle[f"accelerator_type:{actor_options['accelerator_type']}"] = 0.001
    return bundle


def initial_replicas(options: Mapping[str, Any]) -> int:
    """Replicas Serve starts with: ``num_replicas``, or autoscaling's initial or minimum."""
    scaling = options.get("autoscaling_config")
    if scaling:
        return int(scaling.get("initial_replicas") or scaling.get("min_replicas", 1))
    return int(options.get("num_replicas", 1))
