"""What the commands share: the ``--url`` arguments and client, progress bars, and the
application service over the configured stores, in this process."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

from serve_app.config import AppConfig
from serve_app.errors import InvalidInputError

if TYPE_CHECKING:
    from serve_app.client import ServiceClient
    from serve_app.stores.index import StoreIndex


def quiet_libraries() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.utils.logging.set_verbosity_error()  # type: ignore[no-untyped-call,unused-ignore]
    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call,unused-ignore]
    # opensearch-py logs every non-2xx answer, including the expected 404 of an alias lookup.
    logging.getLogger("opensearch").setLevel(logging.ERROR)


def progress(total: int, desc: str, unit: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=None)


def service_arguments(parser: argparse.ArgumentParser) -> None:
    """``--url``: go through a running service's HTTP API instead of opening the index, which
    that service holds (one process owns an embedded index)."""
    parser.add_argument(
        "--url", help="a running service (e.g. http://127.0.0.1:8000): use its HTTP API"
    )
    parser.add_argument(
        "--api-key-env",
        default="SERVE_APP_API_KEY",
        help="environment variable holding the API key sent with --url",
    )
    parser.add_argument("--timeout-s", type=float, default=900.0, help="bound of each request")
    parser.set_defaults(through_service=True)  # what serve_app.extras reads: no extra with --url


def client(args: argparse.Namespace) -> ServiceClient:
    """The ``--url`` service's HTTP API; the tenant is the credential's, never a flag."""
    from serve_app.client import ServiceClient

    if getattr(args, "tenant", None) not in (None, "default"):
        raise InvalidInputError(
            "--tenant does not apply with --url: the service takes the tenant from the "
            f"credential (${args.api_key_env})"
        )
    return ServiceClient(args.url, os.environ.get(args.api_key_env), args.timeout_s)


@contextlib.asynccontextmanager
async def connected(args: argparse.Namespace, tenant_scoped: bool = True) -> AsyncIterator[Any]:
    """The ``--url`` service's client (``serve_app.client.ServiceClient``), closed after use;
    ``tenant_scoped``: ``--tenant`` would name a scope, which the credential decides."""
    from serve_app.client import ServiceClient

    api = (
        client(args)
        if tenant_scoped
        else ServiceClient(args.url, os.environ.get(args.api_key_env), args.timeout_s)
    )
    try:
        yield api
    finally:
        await api.close()


def printable(answer: Any) -> str:
    """An answer (a response model or plain data) as indented JSON."""
    import json

    if hasattr(answer, "model_dump"):
        answer = answer.model_dump(mode="json")
    return json.dumps(answer, indent=2, default=str)


@contextlib.asynccontextmanager
async def collection_service(config: AppConfig) -> AsyncIterator[Any]:
    """``CollectionService`` over the configured stores as they are (no model is loaded),
    closed after use."""
    from serve_app.service.collections import CollectionService
    from serve_app.stores.base import TOPOLOGIES

    index = cast("StoreIndex", TOPOLOGIES.create(config.stores.topology, config))
    try:
        await index.attach()
        yield CollectionService(index, config)
    finally:
        await index.close()


@contextlib.asynccontextmanager
async def retrieval_service(config: AppConfig, with_llm: bool = False) -> AsyncIterator[Any]:
    """``RetrievalService`` in this process (every model loaded; the LLM with ``with_llm``),
    closed after use."""
    from serve_app.pipelines.components import build_components
    from serve_app.service import RetrievalService

    llm = None
    if with_llm:
        from serve_app.generation import build_llm

        if not config.llm.enabled:
            raise InvalidInputError(
                "answers need an LLM: set llm.enabled (config/local.yaml has one)"
            )
    components = await build_components(config)
    try:
        if with_llm:
            llm = build_llm(config.llm)
        yield RetrievalService(components, llm=llm)
    finally:
        close = getattr(llm, "close", None)
        if close is not None:
            close()
        await components.close()
