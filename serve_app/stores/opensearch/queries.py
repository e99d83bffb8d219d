"""Queries of the OpenSearch backend: BM25 on analysed text fields and SPLADE in a
``rank_features`` field, every strategy of every query of a batch in one ``_msearch``."""

from __future__ import annotations

from typing import Any, cast

from serve_app.stores.opensearch import bodies
from serve_app.stores.opensearch.connection import OpenSearchConnection, OpenSearchStoreError
from serve_app.stores.values import Hit, StrategyQuery


class OpenSearchQueries:
    """Batched search of the index behind the alias."""

    def __init__(self, conn: OpenSearchConnection) -> None:
        self.conn = conn

    def _body(self, query: StrategyQuery) -> dict[str, Any] | None:
        clauses = bodies.filter_clauses(query.scope, query.filters)
        if query.strategy == "bm25":
            if not query.query.text.strip():
                return None
            return bodies.bm25_query(self.conn.config, query.query.text, query.limit, clauses)
        if query.strategy == "splade":
            if query.query.splade is None:
                raise ValueError("splade search needs a splade query vector")
            return bodies.splade_query(self.conn.config, query.query.splade, query.limit, clauses)
        raise ValueError(f"OpenSearch does not serve the {query.strategy!r} strategy")

    async def query(self, queries: list[StrategyQuery]) -> list[list[Hit]]:
        requests = [self._body(q) for q in queries]
        runnable = [i for i, body in enumerate(requests) if body is not None]
        results: list[list[Hit]] = [[] for _ in queries]
        if not runnable:
            return results
        # One round trip for every strategy of every query of the batch.
        lines: list[dict[str, Any]] = []
        for i in runnable:
            lines.extend(({"index": self.conn.alias}, cast(dict[str, Any], requests[i])))
        response = await self.conn._call("search", self.conn.client.msearch(body=lines))
        for i, item in zip(runnable, response["responses"], strict=True):
            if "error" in item:
                error = item["error"]
                reason = error.get("reason") if isinstance(error, dict) else error
                raise OpenSearchStoreError(
                    f"OpenSearch {queries[i].strategy} search failed: {reason}"
                )
            results[i] = [
                Hit(h["_id"], h["_source"]["doc_id"], float(h["_score"]))
                for h in item["hits"]["hits"]
            ]
        return results
