"""What each command needs beyond the base install, checked before it does anything.

A command that needs an extra which is not installed is refused at start, naming the extra
and the install line, instead of failing deep inside its work (``serve-app eval`` used to
index a whole corpus before ``ir_measures`` was missing).
"""

from __future__ import annotations

import importlib.util
from argparse import Namespace

from serve_app.config import AppConfig
from serve_app.errors import MissingExtraError

# The modules that stand for each extra of pyproject.toml: an extra is installed when all of
# them can be found. Only the modules the commands import are listed.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "serve": ("ray", "fastapi", "multipart", "jwt", "prometheus_client", "psutil"),
    "stores": ("qdrant_client", "opensearchpy"),
    "k8s": ("kubernetes",),
    "mcp": ("mcp",),
    "bench": ("ir_measures",),
    "llm": ("xllamacpp",),
    "gpu": ("vllm",),
}


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_modules(extra: str) -> list[str]:
    return [module for module in EXTRA_MODULES[extra] if not installed(module)]


def _store_extras(config: AppConfig) -> list[str]:
    return [] if config.stores.topology == "embedded" else ["stores"]


def _model_extras(config: AppConfig) -> list[str]:
    backends = {config.dense.backend}
    if config.reranker.enabled:
        backends.add(config.reranker.backend)
    return ["gpu"] if "vllm" in backends else []


def _llm_extras(config: AppConfig) -> list[str]:
    if not config.llm.enabled:
        return []
    return ["llm"] if config.llm.backend == "llama.cpp" else ["gpu"]


def command_extras(command: str, config: AppConfig, args: Namespace) -> list[str]:
    """The extras ``command`` needs with this configuration and these arguments."""
    if getattr(args, "through_service", False) and getattr(args, "url", None):
        return []  # a command with --url (cli.common.service_arguments) needs only the client
    needs: list[str]
    if command == "serve":
        needs = ["serve", *_store_extras(config), *_model_extras(config), *_llm_extras(config)]
    elif command in {"ingest", "search"}:
        needs = [*_store_extras(config), *_model_extras(config)]
    elif command == "answer":
        needs = [*_store_extras(config), *_model_extras(config), *_llm_extras(config)]
    elif command in {"eval", "tune"}:
        needs = ["bench", *_store_extras(config), *_model_extras(config)]
    elif command in {"inspect", "collections", "documents", "snapshot"}:
        needs = _store_extras(config)
    elif command == "mcp":
        needs = ["mcp"]
    elif command == "cluster":
        needs = ["k8s"]
    else:  # validate reports what is missing as failed checks instead of refusing
        needs = []
    return list(dict.fromkeys(needs))


def require_extras(command: str, config: AppConfig, args: Namespace) -> None:
    """Refuse ``command`` before it starts when an extra it needs is not installed."""
    missing = {
        extra: modules
        for extra in command_extras(command, config, args)
        if (modules := missing_modules(extra))
    }
    if not missing:
        return
    names = ",".join(missing)
    detail = "; ".join(f"{extra}: {', '.join(mods)}" for extra, mods in missing.items())
    raise MissingExtraError(
        f"serve-app {command} needs the {names} extra{'s' if len(missing) > 1 else ''} "
        f"(not importable: {detail}); install it with: pip install 'serve-app[{names}]'"
    )
