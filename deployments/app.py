"""The graph builder: ``deployments.app:build_app`` for ``serve run``, Serve configs and RayService.

``args["config"]`` is either a path to the YAML configuration or the configuration itself
(a mapping, as in generated Serve configs and the Helm chart). Environment overrides
(``SERVE_APP__...``) apply on top in both cases.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.serve import Application
from ray.serve.deployment import Deployment

from deployments.chunker import ChunkerDeployment
from deployments.dense import DenseDeployment
from deployments.ingress import IngressDeployment
from deployments.llm import LlmDeployment
from deployments.reranker import RerankerDeployment
from deployments.settings import serve_settings
from deployments.splade import SpladeDeployment
from deployments.store import StoreDeployment
from serve_app.config import AppConfig, config_from_dict, env_overrides, load_config
from serve_app.config import merge_dicts as merge_config
from serve_app.pipelines.components import check_config


def resolve_config(args: dict[str, Any]) -> AppConfig:
    source = args.get("config")
    if source is None or isinstance(source, str | Path):
        return load_config(source)
    if isinstance(source, dict):
        return config_from_dict(merge_config(source, env_overrides()), "serve args")
    raise TypeError("args['config'] must be a path or a mapping")


def bind(deployment: Deployment, config: AppConfig, *args: Any) -> Application:
    """``deployment`` with the options its class supplies for ``config``, bound to ``args``."""
    options = deployment.func_or_class.get_deployment_options(config)
    return deployment.options(**options).bind(*args)


def build_app_from_config(config: AppConfig) -> Application:
    check_config(config)
    serve_settings(config)  # the serve: section and its rules, before anything is bound
    data = config.model_dump(mode="json")
    chunker = bind(ChunkerDeployment, config, data)
    dense = bind(DenseDeployment, config, data)
    splade = bind(SpladeDeployment, config, data) if config.splade.enabled else None
    reranker = bind(RerankerDeployment, config, data) if config.reranker.enabled else None
    # Every store replica opens its index itself, for the dense model's id and dimension.
    store = bind(StoreDeployment, config, data, dense)
    llm = bind(LlmDeployment, config, data) if config.llm.enabled else None
    return bind(IngressDeployment, config, data, chunker, dense, splade, reranker, store, llm)


def build_app(args: dict[str, Any]) -> Application:
    return build_app_from_config(resolve_config(args))
