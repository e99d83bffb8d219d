"""The graph builder: ``deployments.app:build_app`` for ``serve run``, Serve configs and RayService.

``args["config"]`` is either a path to the YAML configuration or the configuration itself
(a mapping, as in generated Serve configs and the Helm chart). Environment overrides
(``SERVE_APP__...``) apply on top in both cases.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.serve import Application

from deployments.chunker import ChunkerDeployment
from deployments.dense import DenseDeployment
from deployments.ingress import IngressDeployment
from deployments.options import deployment_options
from deployments.reranker import RerankerDeployment
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


def build_app_from_config(config: AppConfig) -> Application:
    check_config(config)
    data = config.model_dump(mode="json")
    serve = config.serve
    chunker = ChunkerDeployment.options(**deployment_options(serve.chunker)).bind(data)
    dense = DenseDeployment.options(**deployment_options(serve.dense)).bind(data)
    splade = (
        SpladeDeployment.options(**deployment_options(serve.splade)).bind(data)
        if config.splade.enabled
        else None
    )
    reranker = (
        RerankerDeployment.options(**deployment_options(serve.reranker)).bind(data)
        if config.reranker.enabled
        else None
    )
    # Every store replica opens its index itself, for the dense model's id and dimension.
    store = StoreDeployment.options(**deployment_options(serve.store)).bind(data, dense)
    return IngressDeployment.options(**deployment_options(serve.ingress)).bind(
        data, chunker, dense, splade, reranker, store
    )


def build_app(args: dict[str, Any]) -> Application:
    return build_app_from_config(resolve_config(args))
