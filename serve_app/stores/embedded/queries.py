"""Queries of the embedded store: a batch of strategy queries in one engine call.

The engine's Python binding holds the GIL for the whole of each call (docs/benchmarks.md:
beside back-to-back searches or fetches, another thread of the process that ticks every
millisecond gets about one tick in per call, between calls). A worker thread
therefore buys those calls no concurrency, only two hand-offs per call, each of which waits
for the GIL behind Ray's own threads in a Serve replica: the search path's calls (``query``,
``present``, ``chunks``) run inline on the caller's event loop, which they would stall
just the same from a thread. Writes, scrolls and the rest keep their worker thread (writes
serialise on a lock of their own there)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from itertools import repeat
from typing import Any

import qdrant_edge as edge

from serve_app.stores import qdrant_requests as qr
from serve_app.stores.embedded.filters import sparse_vector, to_edge_filter
from serve_app.stores.embedded.shard import EdgeShardOwner
from serve_app.stores.values import Hit, StrategyQuery

_new_hit = partial(tuple.__new__, Hit)  # a Hit from a (chunk_id, doc_id, score) tuple


class EdgeQueries:
    """Batched search of the shard."""

    def __init__(self, conn: EdgeShardOwner) -> None:
        self.conn = conn

    def _request(self, plan: qr.QueryPlan) -> edge.QueryRequest:
        if isinstance(plan.search, qr.DenseSearch):
            vector: Any = plan.search.vector
            params: edge.SearchParams | None = edge.SearchParams(
                hnsw_ef=self.conn.config.hnsw_ef, exact=self.conn.config.exact
            )
        else:
            vector = sparse_vector(plan.search.indices, plan.search.values)
            params = (
                edge.SearchParams(
                    idf=edge.IdfParams(
                        corpus=to_edge_filter(qr.chunk_filter(plan.search.idf_scope))
                    )
                )
                if plan.search.idf_scope is not None
                else None
            )
        return edge.QueryRequest(
            limit=plan.limit,
            query=edge.Query.Nearest(vector, using=plan.using),
            filter=to_edge_filter(plan.filter),
            with_payload=edge.PayloadSelector.Include(["doc_id"]) if plan.with_doc_id else False,
            params=params,
        )

    def _query_sync(self, queries: list[StrategyQuery]) -> list[list[Hit]]:
        plans = [qr.query_plan(q) for q in queries]
        runnable = [i for i, plan in enumerate(plans) if plan is not None]
        results: list[list[Hit]] = [[] for _ in queries]
        if runnable:
            batch = self.conn.shard.query_batch(
                edge.QueryBatchRequest([self._request(plans[i]) for i in runnable])  # type: ignore[arg-type]
            )
            for i, points in zip(runnable, batch, strict=True):
                results[i] = self._hits(points, plans[i].with_doc_id)  # type: ignore[union-attr]
        return results

    def _hits(self, points: list[Any], with_doc_id: bool) -> list[Hit]:
        # Column by column: each attribute read crosses into the engine's binding, and a search
        # reads up to ``candidates`` hits per strategy per query (docs/benchmarks.md).
        ids = self.conn._id_text.many([p.id for p in points])
        scores = [p.score for p in points]
        doc_ids: Iterable[str] = (
            [p.payload["doc_id"] if p.payload else "" for p in points]
            if with_doc_id
            else repeat("")
        )
        return list(map(_new_hit, zip(ids, doc_ids, scores, strict=False)))  # repeat("")

    async def query(self, queries: list[StrategyQuery]) -> list[list[Hit]]:
        return self._query_sync(queries)  # inline: see the module's docstring
