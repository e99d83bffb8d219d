"""Whether the replicas a configuration starts with fit the Ray cluster they start on.

Serve waits for every replica to be scheduled: a deployment that asks for more than the
cluster has leaves ``serve.run`` waiting for ever, logging only that a replica "has taken
more than 30s to be scheduled". A local run checks first and names what does not fit."""

from __future__ import annotations

from collections.abc import Mapping

from deployments.builder.graph import bound_deployments
from deployments.replicas.options import initial_replicas, replica_bundle
from deployments.settings import ServiceConfig
from serve_app.errors import ConfigError

# Fractions such as 0.4 + 0.3 + 0.3 GPUs must not fail on float rounding.
_TOLERANCE = 1e-6


def initial_demand(config: ServiceConfig) -> dict[str, tuple[int, dict[str, float]]]:
    """Per bound deployment: (replicas at start, the resources of one replica)."""
    demand = {}
    for name, deployment in bound_deployments(config).items():
        options = deployment.func_or_class.get_deployment_options(config)
        demand[name] = (initial_replicas(options), replica_bundle(options["ray_actor_options"]))
    return demand


def check_fits(config: ServiceConfig, capacity: Mapping[str, float]) -> None:
    """Raise a ``ConfigError`` naming every resource the starting replicas ask for beyond
    ``capacity`` (a one-node cluster's resources, as ``ray.cluster_resources()`` gives them)."""
    demand = initial_demand(config)
    totals: dict[str, float] = {}
    for replicas, bundle in demand.values():
        for resource, amount in bundle.items():
            totals[resource] = totals.get(resource, 0.0) + replicas * amount
    short = {r: a for r, a in totals.items() if a > capacity.get(r, 0.0) + _TOLERANCE}
    if not short:
        return
    shares = ", ".join(
        f"{name} {replicas} x {bundle[r]:g}"
        for r in short
        for name, (replicas, bundle) in demand.items()
        if bundle.get(r) and replicas
    )
    wanted = ", ".join(f"{r} {a:g} of {capacity.get(r, 0.0):g}" for r, a in short.items())
    raise ConfigError(
        f"the deployments' starting replicas need more than this Ray cluster has ({wanted}): "
        f"{shares}. Serve would wait for ever to schedule them; lower serve.<deployment>."
        "num_cpus / num_gpus / num_replicas (or autoscaling.min_replicas), or give Ray more"
    )
