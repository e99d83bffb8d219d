"""Loading: YAML, then environment overrides (``SERVE_APP__SECTION__FIELD``), the environment
winning. The overrides are pydantic-settings' environment source with ``__`` as its nested
delimiter; a value that is a list or a mapping is read as YAML (``[http://a:9200]``), a
scalar is coerced by its field's type (``SERVE_APP__SEARCH__RERANK=true``), ``null`` is None.
A variable that names no section is refused, as a typo in the file is."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml  # type: ignore[import-untyped,unused-ignore]
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import EnvSettingsSource
from pydantic_settings.sources.utils import parse_env_vars

from serve_app.config.app import AppConfig
from serve_app.config.base import CONFIG_ENV, ENV_PREFIX
from serve_app.errors import ConfigError

ConfigT = TypeVar("ConfigT", bound=AppConfig)
NULL = "null"


class EnvironmentOverrides(EnvSettingsSource):
    """The ``SERVE_APP__`` variables of ``environ`` as a nested mapping over ``model``'s
    fields (pydantic-settings' environment source, fed a given environment)."""

    def __init__(self, model: type[BaseModel], environ: Mapping[str, str]) -> None:
        super().__init__(
            model,  # type: ignore[arg-type]  # it reads the model's fields only
            case_sensitive=False,
            env_prefix=ENV_PREFIX,
            env_nested_delimiter="__",
            env_parse_none_str=NULL,
        )
        self.env_vars = parse_env_vars(environ, False, False, NULL)
        self.unknown = sorted(
            name
            for name in environ
            if name.upper().startswith(ENV_PREFIX)
            and name[len(ENV_PREFIX) :].split("__")[0].lower() not in model.model_fields
        )

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        return yaml.safe_load(value) if isinstance(value, str) else value


def env_overrides(
    environ: Mapping[str, str] | None = None, model: type[BaseModel] = AppConfig
) -> dict[str, Any]:
    """Nested mapping of the ``SERVE_APP__A__B=value`` overrides in ``environ`` (default:
    this process's environment); ConfigError for a variable that names no section."""
    source = EnvironmentOverrides(model, os.environ if environ is None else environ)
    if source.unknown:
        raise ConfigError(
            f"environment override {', '.join(source.unknown)} names no configuration section "
            f"(sections: {', '.join(model.model_fields)})"
        )
    return source()


def merge_dicts(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` laid over it, mapping by mapping."""
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


def config_from_dict(
    data: Mapping[str, Any] | BaseModel,
    origin: str = "<dict>",
    model: type[ConfigT] = AppConfig,  # type: ignore[assignment]  # mypy#3737
) -> ConfigT:
    """``data`` validated as ``model`` (ConfigError naming each field that is wrong)."""
    if isinstance(data, BaseModel):
        data = data.model_dump()
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(error, origin)) from None


def load_config(
    path: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    model: type[ConfigT] = AppConfig,  # type: ignore[assignment]  # mypy#3737
) -> ConfigT:
    """Load YAML (``path``, else ``$SERVE_APP_CONFIG``, else defaults) with the environment's
    overrides on top, as ``model`` (the library's AppConfig, or a layer's extension of it)."""
    env = os.environ if environ is None else environ
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
    return config_from_dict(merge_dicts(data, env_overrides(env, model)), origin, model)
