"""``serve-app mcp``: a Model Context Protocol server (the official ``mcp`` SDK) for editors and
agents, over a running service's HTTP API.

It holds no index and loads no model: every tool is one or two HTTP calls to the service
(``--url``, in a cluster or on this machine) with the API key from ``--api-key-env``, so the
tenant is the key's, as for any client. Tools: ``ingest``, ``search``, ``inspect``,
``list_collections``, ``create_collection``, ``delete_collection``, ``get_document``,
``delete_document``, ``answer``: the HTTP API's operations. An API error becomes a tool error carrying the API's code, message and
request id (each call sends its own ``X-Request-ID``); every call is bounded in time
(``--timeout-s``, also sent as ``X-Request-Timeout-Ms`` so the service gives up too).
Transports: stdio (editors start it as a subprocess) and streamable HTTP (remote agents).
"""

from __future__ import annotations

import argparse
import mimetypes
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field

from serve_app.client import ApiCallError, ServiceClient, read_answer
from serve_app.pipelines.answer_events import AnswerDone, AnswerMetadata
from serve_app.schemas import DEFAULT_COLLECTION, FUSION_METHODS, STRATEGIES


class DocumentInput(BaseModel):
    """A document to index: plain text with an id (unique within the collection)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="document id, unique within the collection")
    text: str = Field(description="the document's text")
    title: str = ""
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict)


class ToolClient:
    """The service's API for the tools: an API error becomes a tool error carrying the API's
    code, message and request id."""

    def __init__(self, url: str, api_key: str | None, timeout_s: float) -> None:
        self.client = ServiceClient(url, api_key, timeout_s, request_prefix="mcp")

    async def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            return await self.client.call(method, path, **kwargs)
        except ApiCallError as error:
            raise ToolError(str(error)) from None

    async def answer(self, path: str, body: dict[str, Any]) -> tuple[AnswerMetadata, AnswerDone]:
        """The answer's typed metadata and done events (``serve_app.client.read_answer``)."""
        try:
            return await read_answer(self.client, path, body)
        except ApiCallError as error:
            raise ToolError(str(error)) from None


def _collection_path(collection: str) -> str:
    return f"/v1/collections/{collection}"


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


def build_server(service: ToolClient) -> MCPServer:
    server = MCPServer(
        "serve-app",
        instructions=(
            "Hybrid document retrieval (BM25 + SPLADE + dense, fused). Search a collection "
            "with `search`; add documents with `ingest`; `list_collections` names them."
        ),
    )

    @server.tool()
    async def list_collections() -> dict[str, Any]:
        """The collections of your tenant (``default`` always exists)."""
        return await service.call("GET", "/v1/collections")

    @server.tool()
    async def create_collection(name: str) -> dict[str, Any]:
        """Create a named collection in your tenant (names: a-z 0-9 _ -, up to 64)."""
        return await service.call("POST", "/v1/collections", json={"name": name})

    @server.tool()
    async def delete_collection(name: str) -> dict[str, Any]:
        """Delete a named collection and every chunk of it from every store."""
        return await service.call("DELETE", _collection_path(name))

    @server.tool()
    async def get_document(doc_id: str, collection: str = DEFAULT_COLLECTION) -> dict[str, Any]:
        """A document's title, metadata, content hash and chunk ids."""
        return await service.call("GET", f"{_collection_path(collection)}/documents/{doc_id}")

    @server.tool()
    async def delete_document(doc_id: str, collection: str = DEFAULT_COLLECTION) -> dict[str, Any]:
        """Remove a document's chunks from every store."""
        return await service.call("DELETE", f"{_collection_path(collection)}/documents/{doc_id}")

    @server.tool()
    async def inspect(collection: str = DEFAULT_COLLECTION) -> dict[str, Any]:
        """A collection's state, chunk and document counts per store, and its model binding."""
        return await service.call("GET", _collection_path(collection))

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
        for strategy in strategies or []:
            if strategy not in STRATEGIES:
                raise ToolError(f"INVALID_INPUT: unknown strategy {strategy!r}; use {STRATEGIES}")
        if fusion is not None and fusion not in FUSION_METHODS:
            raise ToolError(f"INVALID_INPUT: unknown fusion {fusion!r}; use {FUSION_METHODS}")
        body: dict[str, Any] = {"query": query, "top_k": top_k}
        if strategies:
            body["strategies"] = strategies
        if fusion:
            body["fusion"] = {"method": fusion}
        if filters:
            body["filters"] = filters
        if rerank is not None:
            body["rerank"] = rerank
        answer = await service.call("POST", f"{_collection_path(collection)}/search", json=body)
        return {
            "query": query,
            "collection": collection,
            "strategies": answer["strategies"],
            "fusion": answer["fusion"],
            "results": [_hit(i, hit) for i, hit in enumerate(answer["results"], 1)],
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
        body: dict[str, Any] = {"question": question}
        for key, value in (
            ("top_k", top_k),
            ("multi_query", multi_query),
            ("understand", understand),
            ("max_tokens", max_tokens),
        ):
            if value is not None:
                body[key] = value
        metadata, done = await service.answer(f"{_collection_path(collection)}/answer", body)
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
        files (txt, md, html, JATS xml, pdf) read by this MCP server. Re-ingesting unchanged
        documents is a no-op; a changed document replaces its old version."""
        if not documents and not paths:
            raise ToolError("INVALID_INPUT: give documents or paths")
        target = f"{_collection_path(collection)}/documents"
        results = []
        if documents:
            payload = {"documents": [d.model_dump() for d in documents]}
            results.append(await service.call("POST", target, json=payload))
        if paths:
            files = []
            for name in paths:
                path = Path(name).expanduser()
                if not path.is_file():
                    raise ToolError(f"INVALID_INPUT: {name} is not a file")
                kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                files.append(("files", (path.name, path.read_bytes(), kind)))
            results.append(await service.call("POST", target, files=files))
        return {
            "collection": collection,
            "written": [d for r in results for d in r["written"]],
            "unchanged": [d for r in results for d in r["unchanged"]],
            "chunks_written": sum(r["chunks_written"] for r in results),
        }

    return server


def run(args: argparse.Namespace) -> int:
    """Serve until the client goes (stdio) or the process is stopped; arguments from
    ``serve-app mcp`` (serve_app/cli/mcp.py)."""
    service = ToolClient(args.url, os.environ.get(args.api_key_env), args.timeout_s)
    server = build_server(service)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port)
    return 0
