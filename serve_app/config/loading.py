"""Loading: YAML, then environment overrides (``SERVE_APP__SECTION__FIELD``, values parsed as
YAML scalars: ``SERVE_APP__DENSE__BATCH_SIZE=64``, ``SERVE_APP__SEARCH__RERANK=true``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from serve_app.config.app import AppConfig
from serve_app.config.base import CONFIG_ENV, ENV_PREFIX
from serve_app.errors import ConfigError


def _set_path(tree: dict[str, Any], keys: list[str], value: Any) -> None:
    node = tree
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"environment override {'.'.join(keys)}: {key} is not a section")
        node = child
    node[keys[-1]] = value


def env_overrides(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Nested dict of ``SERVE_APP__A__B=value`` overrides (values parsed as YAML scalars)."""
    environ = dict(os.environ if environ is None else environ)
    tree: dict[str, Any] = {}
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        keys = [k.lower() for k in name.removeprefix(ENV_PREFIX).split("__") if k]
        if keys:
            _set_path(tree, keys, yaml.safe_load(raw) if raw != "" else "")
    return tree


def merge_dicts(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_dicts(out[key], value)
        else:
            out[key] = value
    return out


def _format_validation_error(error: ValidationError, origin: str) -> str:
    lines = [f"invalid configuration ({origin}):"]
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "<root>"
        lines.append(f"  {field}: {item['msg']}")
    return "\n".join(lines)


def config_from_dict(data: dict[str, Any], origin: str = "<dict>") -> AppConfig:
    try:
        return AppConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(error, origin)) from None


def load_config(path: str | Path | None = None, environ: dict[str, str] | None = None) -> AppConfig:
    """Load YAML (``path``, else ``$SERVE_APP_CONFIG``, else defaults) plus env overrides."""
    env = dict(os.environ if environ is None else environ)
    path = path or env.get(CONFIG_ENV)
    data: dict[str, Any] = {}
    origin = "defaults"
    if path:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"config file {file} does not exist")
        loaded = yaml.safe_load(file.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {file} must hold a mapping at the top level")
        data, origin = loaded, str(file)
    data = merge_dicts(data, env_overrides(env))
    return config_from_dict(data, origin)
