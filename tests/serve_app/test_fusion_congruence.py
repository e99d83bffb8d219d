"""Congruence: the pipeline's pure fusion functions against Qdrant's own server-side fusion
(Query API: prefetch per strategy, then RRF or DBSF), run on the same points through
qdrant-client local mode. The pipeline fuses itself (to keep per-strategy provenance and to
fuse across stores); this pins down how it relates to what Qdrant computes:

* DBSF: identical (sample standard deviation, a one-item list maps to 0.5).
* RRF: the pipeline uses Cormack's ``1 / (k + rank)`` (OpenSearch's and Elasticsearch's
  convention); Qdrant computes ``1 / (rank + k - 1)``, so our ``k`` equals Qdrant's ``k - 1``.
  Weighted RRF differs by design (Qdrant divides the rank by the weight, we multiply the
  contribution), so it is not compared.
"""

from __future__ import annotations

import numpy as np
import pytest
from qdrant_client import QdrantClient
from qdrant_client import models as qm

from serve_app.fusion.strategies import dbsf, rrf

N_POINTS, DEPTH, TOP = 300, 40, 25


@pytest.fixture(scope="module")
def collection():
    rng = np.random.default_rng(7)
    client = QdrantClient(location=":memory:")
    client.create_collection(
        "c",
        vectors_config={"dense": qm.VectorParams(size=16, distance=qm.Distance.COSINE)},
        sparse_vectors_config={"splade": qm.SparseVectorParams()},
    )
    points = []
    for i in range(N_POINTS):
        terms = sorted(rng.choice(200, size=12, replace=False).tolist())
        points.append(
            qm.PointStruct(
                id=i,
                vector={
                    "dense": rng.normal(size=16).tolist(),
                    "splade": qm.SparseVector(indices=terms, values=rng.random(12).tolist()),
                },
            )
        )
    client.upsert("c", points)
    queries = []
    for _ in range(12):
        terms = sorted(rng.choice(200, size=20, replace=False).tolist())
        queries.append(
            {
                "dense": rng.normal(size=16).tolist(),
                "splade": qm.SparseVector(indices=terms, values=rng.random(20).tolist()),
            }
        )
    yield client, queries
    client.close()


def per_strategy(client, query) -> dict[str, list[tuple[str, float]]]:
    lists = {}
    for name, vector in query.items():
        hits = client.query_points("c", query=vector, using=name, limit=DEPTH).points
        lists[name] = [(str(p.id), p.score) for p in hits]
    return lists


def server_fused(client, query, fusion_query) -> list[tuple[str, float]]:
    prefetch = [qm.Prefetch(query=v, using=n, limit=DEPTH) for n, v in query.items()]
    hits = client.query_points("c", prefetch=prefetch, query=fusion_query, limit=TOP).points
    return [(str(p.id), p.score) for p in hits]


def assert_same_ranking(ours, theirs, rel):
    """Same scores position by position; ids equal up to the order inside a tie."""
    ours = ours[: len(theirs)]
    assert [s for _, s in ours] == pytest.approx([s for _, s in theirs], rel=rel)
    groups: dict[float, tuple[set, set]] = {}
    for (a, score), (b, _) in zip(ours, theirs, strict=True):
        mine, other = groups.setdefault(round(score, 9), (set(), set()))
        mine.add(a)
        other.add(b)
    last = round(ours[-1][1], 9)  # a tie cut by the limit may keep different members
    assert all(m == o for s, (m, o) in groups.items() if s != last)


def test_rrf_equals_qdrant_rrf_with_k_offset_by_one(collection):
    client, queries = collection
    for query in queries:
        ours = rrf(per_strategy(client, query), k=60)
        theirs = server_fused(client, query, qm.RrfQuery(rrf=qm.Rrf(k=61)))
        assert_same_ranking(ours, theirs, rel=1e-9)


def test_dbsf_equals_qdrant_dbsf(collection):
    client, queries = collection
    for query in queries:
        ours = dbsf(per_strategy(client, query))
        theirs = server_fused(client, query, qm.FusionQuery(fusion=qm.Fusion.DBSF))
        # Qdrant normalises the float32 scores in float32 arithmetic here and there.
        assert_same_ranking(ours, theirs, rel=1e-6)
