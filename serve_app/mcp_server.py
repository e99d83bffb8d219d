"""``serve-app mcp``: a Model Context Protocol server (the official ``mcp`` SDK) for editors and
agents, over a running service's HTTP API.

It holds no index and loads no model: every tool is one or two HTTP calls to the service
(``--url``, in a cluster or on this machine) with the API key from ``--api-key-env``, so the
tenant is the key's, as for any client. Tools: ``ingest``, ``search``, ``inspect``,
``list_collections``, ``create_collection``, ``delete_collection``, ``list_documents``,
``get_document``, ``delete_document``, ``answer``: the HTTP API's operations. An API error becomes a tool error carrying the API's code, message and
request id (each call sends its own ``X-Request-ID``); every call is bounded in time
(``--timeout-s``, also sent as ``X-Request-Timeout-Ms`` so the service gives up too).
Transports: stdio (editors start it as a subprocess) and streamable HTTP (remote agents).

What an agent can reach through it is bounded: every ``collection`` and ``doc_id`` is one
percent-encoded path segment (``serve_app.client.path_segment``: ``..`` walked up to other
routes); ``ingest(paths)`` reads only regular files under ``--ingest-root`` (stdio: the
working directory by default; HTTP: none unless given), symlinks resolved, each within
``--max-file-bytes``; over HTTP a bearer token (``--token-env``) is checked by the SDK's
token verifier, and without one the server binds loopback only.
"""

from __future__ import annotations

import argparse
import hmac
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, ValidationError

from serve_app.api.models import DocumentIn, SearchResponseOut
from serve_app.client import ServiceClient
from serve_app.config.api import is_loopback
from serve_app.errors import ServeAppError
from serve_app.schemas import DEFAULT_COLLECTION, AnswerRequest, SearchRequest


class DocumentInput(BaseModel):
    """A document to index: plain text with an id (unique within the collection)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="document id, unique within the collection")
    text: str = Field(description="the document's text")
    title: str = ""
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict)


T = TypeVar("T")


class ToolClient:
    """The service's client for the tools (``ServiceClient``): an API error, or input the
    client refuses, becomes a tool error carrying the code, message and request id."""

    def __init__(self, url: str, api_key: str | None, timeout_s: float) -> None:
        self.client = ServiceClient(url, api_key, timeout_s, request_prefix="mcp")

    async def run(self, call: Callable[[ServiceClient], Awaitable[T]]) -> T:
        try:
            return await call(self.client)
        except ServeAppError as error:  # ApiCallError among them
            raise ToolError(f"{error.code}: {error.message}") from None
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in error.errors()
            )
            raise ToolError(f"INVALID_INPUT: {problems}") from None


def dumped(answer: BaseModel) -> dict[str, Any]:
    return answer.model_dump(mode="json")


@dataclass
class FileAccess:
    """What ``ingest(paths)`` may read: regular files under ``roots``, each within
    ``max_bytes``."""

    roots: list[Path] = field(default_factory=list)
    max_bytes: int = 20_000_000

    def read(self, name: str) -> tuple[str, bytes]:
        path = Path(name).expanduser().resolve()
        if not any(path.is_relative_to(root) for root in self.roots):
            where = ", ".join(str(r) for r in self.roots) or "none configured (--ingest-root)"
            raise ToolError(f"INVALID_INPUT: {name} is outside the ingest roots: {where}")
        if not path.is_file():
            raise ToolError(f"INVALID_INPUT: {name} is not a file")
        size = path.stat().st_size
        if size > self.max_bytes:
            raise ToolError(
                f"PAYLOAD_TOO_LARGE: {name} has {size} bytes, over {self.max_bytes} "
                "(--max-file-bytes)"
            )
        return path.name, path.read_bytes()


class StaticToken:
    """The SDK's token verifier for one shared bearer token (compared in constant time)."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self.token.encode()):
            return AccessToken(token=token, client_id="serve-app-mcp", scopes=[])
        return None


def _hit(rank: int, hit: dict[str, Any]) -> dict[str, Any]:
    """A result with its provenance: document, chunk, where in the document, scores."""
    return {
        "rank": rank,
        "doc_id": hit["doc_id"],
        "chunk_id": hit["chunk_id"],
        "title": hit["title"],
        "section": hit["section"],
        "heading_chain": hit["heading_chain"],
        "source": hit["source"],
        "char_start": hit["char_start"],
        "char_end": hit["char_end"],
        "score": hit["score"],
        "scores": hit["scores"],
        "metadata": hit["metadata"],
        "text": hit["text"],
    }


def build_server(
    service: ToolClient,
    files: FileAccess | None = None,
    token: str | None = None,
    public_url: str | None = None,
) -> MCPServer:
    files = files or FileAccess()
    auth = None
    if token:
        url = public_url or "http://127.0.0.1"
        auth = AuthSettings(issuer_url=AnyHttpUrl(url), resource_server_url=AnyHttpUrl(url))
    server = MCPServer(
        "serve-app",
        token_verifier=StaticToken(token) if token else None,
        auth=auth,
        instructions=(
            "Hybrid document retrieval (BM25 + SPLADE + dense, fused). Search a collection "
            "with `search`; add documents with `ingest`; `list_collections` names them."
        ),
    )

    @server.tool()
    async def list_collections() -> dict[str, Any]:
        """The collections of your tenant (``default`` always exists)."""
        return dumped(await service.run(lambda api: api.collections()))

    @server.tool()
    async def create_collection(name: str) -> dict[str, Any]:
        """Create a named collection in your tenant (names: a-z 0-9 _ -, up to 64)."""
        return dumped(await service.run(lambda api: api.create_collection(name)))

    @server.tool()
    async def delete_collection(name: str) -> dict[str, Any]:
        """Delete a named collection and every chunk of it from every store."""
        return dumped(await service.run(lambda api: api.delete_collection(name)))

    @server.tool()
    async def list_documents(
        collection: str = DEFAULT_COLLECTION, cursor: str | None = None, limit: int = 100
    ) -> dict[str, Any]:
        """A page of the collection's documents (id, title, source, chunk count); pass the
        page's ``next_cursor`` as ``cursor`` for the next one."""
        return dumped(await service.run(lambda api: api.documents(collection, cursor, limit)))

    @server.tool()
    async def get_document(doc_id: str, collection: str = DEFAULT_COLLECTION) -> dict[str, Any]:
        """A document's title, metadata, content hash and chunk ids."""
        return dumped(await service.run(lambda api: api.document(doc_id, collection)))

    @server.tool()
    async def delete_document(doc_id: str, collection: str = DEFAULT_COLLECTION) -> dict[str, Any]:
        """Remove a document's chunks from every store."""
        return dumped(await service.run(lambda api: api.delete_document(doc_id, collection)))

    @server.tool()
    async def inspect(collection: str = DEFAULT_COLLECTION) -> dict[str, Any]:
        """A collection's state, chunk and document counts per store, and its model binding."""
        return dumped(await service.run(lambda api: api.describe_collection(collection)))

    @server.tool()
    async def search(
        query: str,
        collection: str = DEFAULT_COLLECTION,
        top_k: int = 10,
        strategies: list[str] | None = None,
        fusion: str | None = None,
        filters: dict[str, Any] | None = None,
        rerank: bool | None = None,
    ) -> dict[str, Any]:
        """Hybrid search in a collection. ``strategies``: a subset of bm25, splade, dense
        (all configured ones by default; ``["dense"]`` for dense only); ``fusion``: rrf,
        weighted or dbsf; ``filters``: {"doc_ids": [...], "sections": [...], "metadata":
        {key: value}}; ``rerank``: the cross-encoder over the candidates (the configured
        default when unset). Each result names its document, chunk, section and character span."""

        async def searched(api: ServiceClient) -> SearchResponseOut:
            request = SearchRequest.model_validate(
                {
                    "query": query,
                    "collection": collection,
                    "top_k": top_k,
                    "strategies": strategies or None,
                    "fusion": {"method": fusion} if fusion else None,
                    "filters": filters,
                    "rerank": rerank,
                }
            )
            return await api.search(request)

        answer = await service.run(searched)
        return {
            "query": query,
            "collection": collection,
            "strategies": answer.strategies,
            "fusion": answer.fusion,
            "results": [_hit(i, dumped(hit)) for i, hit in enumerate(answer.results, 1)],
        }

    @server.tool()
    async def answer(
        question: str,
        collection: str = DEFAULT_COLLECTION,
        top_k: int | None = None,
        multi_query: bool | None = None,
        understand: bool | None = None,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        """A cited answer from a collection's documents: the answer text, its citations
        (passage number -> document, section, character span), the passages it was given
        (with the sub-queries that found each), citations that name no passage and sentences
        without one. ``multi_query``: retrieve reformulations of the question too;
        ``understand``: the query-understanding step (filters, relevance); unset: the
        service's defaults. If the LLM fails (an outage, a deadline), the tool fails with the
        API's error code and message (``isError``)."""
        given = {
            "top_k": top_k,
            "multi_query": multi_query,
            "understand": understand,
            "max_tokens": max_tokens,
        }
        fields = {k: v for k, v in given.items() if v is not None}
        metadata, done = await service.run(
            lambda api: api.answer(
                AnswerRequest.model_validate(
                    {"question": question, "collection": collection, **fields}
                )
            )
        )
        return {
            "question": question,
            "collection": collection,
            "answer": done.answer,
            "early_return": done.early_return,
            "citations": done.citations,
            "invalid_citations": done.invalid_citations,
            "uncited_sentences": done.uncited_sentences,
            "sub_queries": metadata.sub_queries,
            "filters": metadata.filters,
            "passages": [
                {**_hit(r.passage, r.data()), "found_by": r.found_by} for r in metadata.results
            ],
        }

    @server.tool()
    async def ingest(
        collection: str = DEFAULT_COLLECTION,
        documents: list[DocumentInput] | None = None,
        paths: list[str] | None = None,
    ) -> dict[str, Any]:
        """Index documents into a collection: ``documents`` given inline, or ``paths`` of
        files (txt, md, html, JATS xml, pdf) read by this MCP server, under its ingest roots
        only. Re-ingesting unchanged
        documents is a no-op; a changed document replaces its old version."""
        if not documents and not paths:
            raise ToolError("INVALID_INPUT: give documents or paths")
        results = []
        if documents:
            given = [DocumentIn.model_validate(d.model_dump()) for d in documents]
            results.append(await service.run(lambda api: api.ingest(given, collection)))
        if paths:
            uploads = [files.read(name) for name in paths]
            results.append(await service.run(lambda api: api.upload(uploads, collection)))
        return {
            "collection": collection,
            "written": [d for r in results for d in r.written],
            "unchanged": [d for r in results for d in r.unchanged],
            "chunks_written": sum(r.chunks_written for r in results),
        }

    return server


def run(args: argparse.Namespace) -> int:
    """Serve until the client goes (stdio) or the process is stopped; arguments from
    ``serve-app mcp`` (serve_app/cli/mcp.py)."""
    service = ToolClient(args.url, os.environ.get(args.api_key_env), args.timeout_s)
    roots = args.ingest_root or ([Path.cwd()] if args.transport == "stdio" else [])
    files = FileAccess([Path(r).expanduser().resolve() for r in roots], args.max_file_bytes)
    if args.transport == "stdio":
        build_server(service, files).run("stdio")
        return 0
    token = os.environ.get(args.token_env) or None
    if token is None and not is_loopback(args.host):
        print(
            f"serve-app mcp: refusing to serve streamable HTTP on {args.host!r} without a "
            f"bearer token: set ${args.token_env} (clients send Authorization: Bearer ...), "
            "or bind 127.0.0.1",
            file=sys.stderr,
        )
        return 2
    public_url = args.public_url or f"http://{args.host}:{args.port}"
    server = build_server(service, files, token, public_url)
    server.run("streamable-http", host=args.host, port=args.port)
    return 0
