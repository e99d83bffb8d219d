"""The graph builder: ``deployments.builder.graph:build_app`` for ``serve run``, Serve configs
and RayService.

``args["config"]`` is either a path to the YAML configuration or the configuration itself
(a mapping, as in generated Serve configs and the Helm chart). Environment overrides
(``SERVE_APP__...``) apply on top in both cases. It is parsed here, once, into a
``ServiceConfig`` that every deployment is bound to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.serve import Application
from ray.serve.deployment import Deployment

from deployments.replicas.chunker import ChunkerDeployment
from deployments.replicas.dense import DenseDeployment
from deployments.replicas.ingress import IngressDeployment
from deployments.replicas.llm import LlmDeployment
from deployments.replicas.reranker import RerankerDeployment
from deployments.replicas.splade import SpladeDeployment
from deployments.replicas.store import StoreDeployment
from deployments.settings import ServiceConfig, load_service_config, service_config
from serve_app.config import AppConfig, env_overrides, merge_dicts


def resolve_config(args: dict[str, Any]) -> ServiceConfig:
    source = args.get("config")
    if source is None or isinstance(source, str | Path):
        return load_service_config(source)
    if isinstance(source, dict):
        overrides = env_overrides(model=ServiceConfig)
        return service_config(merge_dicts(source, overrides), "serve args")
    raise TypeError("args['config'] must be a path or a mapping")


def bind(deployment: Deployment, config: ServiceConfig, *handles: Any) -> Application:
    """``deployment`` with the options its class supplies for ``config``, bound to the
    parsed ``config`` itself (no replica parses it again) and to ``handles``."""
    options = deployment.func_or_class.get_deployment_options(config)
    return deployment.options(**options).bind(config, *handles)


def bound_deployments(config: ServiceConfig) -> dict[str, Deployment]:
    """The deployments the graph binds for ``config``, by their ``serve:`` names."""
    optional = {
        "splade": (SpladeDeployment, config.splade.enabled),
        "reranker": (RerankerDeployment, config.reranker.enabled),
        "llm": (LlmDeployment, config.llm.enabled),
    }
    deployments = {"chunker": ChunkerDeployment, "dense": DenseDeployment}
    deployments |= {name: d for name, (d, enabled) in optional.items() if enabled}
    return deployments | {"store": StoreDeployment, "ingress": IngressDeployment}


def build_app_from_config(config: AppConfig) -> Application:
    config = service_config(config)
    deployments = bound_deployments(config)

    def bound(name: str, *handles: Any) -> Application | None:
        return bind(deployments[name], config, *handles) if name in deployments else None

    dense = bound("dense")
    # Every store replica opens its index itself, for the dense model's id and dimension.
    store = bound("store", dense)
    parts = (bound("chunker"), dense, bound("splade"), bound("reranker"), store, bound("llm"))
    return bind(deployments["ingress"], config, *parts)


def build_app(args: dict[str, Any]) -> Application:
    return build_app_from_config(resolve_config(args))
