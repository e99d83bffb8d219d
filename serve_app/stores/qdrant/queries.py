"""Queries of the Qdrant backend: a batch of strategy queries in one ``query_batch_points``
call (BM25 with the IDF modifier, IDF from the scope's chunks)."""

from __future__ import annotations

from typing import Any

from qdrant_client import models as qm

from serve_app.stores import qdrant_requests as qr
from serve_app.stores.qdrant.connection import QdrantConnection
from serve_app.stores.qdrant.filters import to_client_filter
from serve_app.stores.values import Hit, StrategyQuery


class QdrantQueries:
    """Batched search of the collection behind the alias."""

    def __init__(self, conn: QdrantConnection) -> None:
        self.conn = conn

    def _request(self, plan: qr.QueryPlan) -> qm.QueryRequest:
        params: qm.SearchParams | None
        if isinstance(plan.search, qr.DenseSearch):
            vector: Any = plan.search.vector
            # Local mode always searches exactly and warns about index parameters.
            params = (
                None
                if self.conn.config.local_path
                else qm.SearchParams(hnsw_ef=self.conn.config.hnsw_ef, exact=self.conn.config.exact)
            )
        else:
            vector = qm.SparseVector(indices=plan.search.indices, values=plan.search.values)
            params = (
                qm.SearchParams(
                    idf=qm.IdfCorpusParams(
                        corpus=to_client_filter(qr.chunk_filter(plan.search.idf_scope))
                    )
                )
                if plan.search.idf_scope is not None
                else None
            )
        return qm.QueryRequest(
            query=vector,
            using=plan.using,
            filter=to_client_filter(plan.filter),
            limit=plan.limit,
            params=params,
            with_payload=["doc_id"] if plan.with_doc_id else False,
        )

    async def query(self, queries: list[StrategyQuery]) -> list[list[Hit]]:
        for q in queries:
            if q.strategy not in self.conn.strategies:
                raise ValueError(f"this Qdrant store does not serve the {q.strategy!r} strategy")
        plans = [qr.query_plan(q) for q in queries]
        runnable = [i for i, plan in enumerate(plans) if plan is not None]
        results: list[list[Hit]] = [[] for _ in queries]
        if not runnable:
            return results
        responses = await self.conn._call(
            "search",
            self.conn.client.query_batch_points(
                self.conn.alias,
                requests=[self._request(plans[i]) for i in runnable],  # type: ignore[arg-type]
            ),
        )
        for i, response in zip(runnable, responses, strict=True):
            results[i] = [
                Hit(str(p.id), (p.payload or {}).get("doc_id", ""), float(p.score))
                for p in response.points
            ]
        return results
