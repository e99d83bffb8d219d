"""The one configuration model of the library, by owner: models, stores, search, the HTTP API,
and loading (YAML plus ``SERVE_APP__`` environment overrides). The ``serve:`` section belongs
to the Ray Serve layer (``deployments/settings.py`` types it); here it is carried unread.
Every field is documented where it is defined."""

from serve_app.config.answer import (
    AnswerConfig,
    AnswerDeadlines,
    MultiQueryConfig,
    UnderstandingConfig,
)
from serve_app.config.api import (
    ApiConfig,
    ApiKeyConfig,
    AuthConfig,
    ConnectionBudget,
    JwtConfig,
    LimitsConfig,
    check_bind,
    is_loopback,
)
from serve_app.config.app import AppConfig
from serve_app.config.base import CONFIG_ENV, ENV_PREFIX, Section
from serve_app.config.loading import config_from_dict, env_overrides, load_config, merge_dicts
from serve_app.config.models import (
    Bm25Config,
    ChunkerConfig,
    DenseConfig,
    LlmConfig,
    QueueConfig,
    RerankerConfig,
    SpladeConfig,
    TorchRuntimeConfig,
    VllmEngineConfig,
    VllmHttpConfig,
    resolve_model_path,
)
from serve_app.config.search import FusionConfig, SearchConfig
from serve_app.config.stores import (
    EmbeddedStoreConfig,
    OpenSearchConfig,
    QdrantConfig,
    StoresConfig,
)

__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "AnswerConfig",
    "AnswerDeadlines",
    "ApiConfig",
    "ApiKeyConfig",
    "AppConfig",
    "AuthConfig",
    "Bm25Config",
    "ChunkerConfig",
    "ConnectionBudget",
    "DenseConfig",
    "EmbeddedStoreConfig",
    "FusionConfig",
    "JwtConfig",
    "LimitsConfig",
    "LlmConfig",
    "MultiQueryConfig",
    "OpenSearchConfig",
    "QdrantConfig",
    "QueueConfig",
    "RerankerConfig",
    "SearchConfig",
    "Section",
    "SpladeConfig",
    "StoresConfig",
    "TorchRuntimeConfig",
    "UnderstandingConfig",
    "VllmEngineConfig",
    "VllmHttpConfig",
    "check_bind",
    "config_from_dict",
    "env_overrides",
    "is_loopback",
    "load_config",
    "merge_dicts",
    "resolve_model_path",
]
