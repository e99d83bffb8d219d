"""The stores: which topology, and each store's connection and index settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from serve_app.config.base import Section


class EmbeddedStoreConfig(Section):
    path: str = "qdrant"  # relative to data_dir
    hnsw_m: int = Field(default=16, ge=4)
    hnsw_ef_construct: int = Field(default=100, ge=4)
    hnsw_ef: int = Field(default=128, ge=1)
    # Below this many KB of vectors per segment, exact search beats the graph (Qdrant default).
    full_scan_threshold_kb: int = Field(default=10_000, ge=1)
    exact: bool = False


class OpenSearchConfig(Section):
    """An external OpenSearch cluster (BM25 on text fields + SPLADE ``rank_features``).

    ``index`` is an alias; the physical index behind it is ``{index}-v{n}``, so a migration
    (or a reindex) switches atomically. Credentials are read from the environment variables
    named here (set from a Kubernetes Secret).
    """

    hosts: list[str] = Field(default_factory=list)
    index: str = "serve-app-chunks"
    username_env: str | None = None
    password_env: str | None = None
    verify_certs: bool = True
    ca_certs: str | None = None
    timeout_s: float = Field(default=10.0, gt=0)
    number_of_shards: int = Field(default=1, ge=1)
    number_of_replicas: int = Field(default=1, ge=0)
    bulk_batch_size: int = Field(default=500, ge=1)
    max_retries: int = Field(default=3, ge=0)
    retry_backoff_s: float = Field(default=0.2, ge=0)
    # Freshness: "wait_for" makes a write searchable before ingest returns (read-your-writes).
    refresh: Literal["wait_for", "true", "false"] = "wait_for"
    # Fields and boosts of the multi_match BM25 query. ``body`` is title + heading chain +
    # text in one field (what the encoders see); the parts can be boosted on their own.
    # Measured on SciFact (osmem-server): body alone 0.64 nDCG@10, cross_fields over content +
    # title^2 0.53, most_fields 0.58: separate short title fields over-weight titles.
    field_boosts: dict[str, float] = Field(default_factory=lambda: {"body": 1.0})
    multi_match_type: Literal["cross_fields", "best_fields", "most_fields"] = "cross_fields"
    # SPLADE query: weighted rank_feature clauses (any OpenSearch) or the neural-search
    # plugin's neural_sparse query with the raw token weights (OpenSearch >= 2.11).
    splade_query: Literal["rank_feature", "neural_sparse"] = "rank_feature"
    splade_query_top_terms: int = Field(default=64, ge=1)
    snapshot_repository: str | None = None

    @model_validator(mode="after")
    def _boosts(self) -> OpenSearchConfig:
        unknown = set(self.field_boosts) - {"body", "content", "title", "section", "heading_chain"}
        if unknown:
            raise ValueError(f"unknown field(s) in field_boosts: {sorted(unknown)}")
        if not any(boost > 0 for boost in self.field_boosts.values()):
            raise ValueError("field_boosts needs at least one field with a positive boost")
        return self


class QdrantConfig(Section):
    """A Qdrant server (``url``) or qdrant-client's local mode (``local_path``, for tests and
    laptops; exact search, no snapshots). ``collection`` is an alias in front of
    ``{collection}-v{n}``. The API key is read from ``api_key_env``."""

    url: str | None = None
    local_path: str | None = None  # relative to data_dir; ":memory:" for a throwaway store
    collection: str = "serve-app-chunks"
    api_key_env: str | None = None
    verify_certs: bool = True
    ca_certs: str | None = None
    timeout_s: float = Field(default=10.0, gt=0)
    hnsw_m: int = Field(default=16, ge=4)
    hnsw_ef_construct: int = Field(default=100, ge=4)
    hnsw_ef: int = Field(default=128, ge=1)
    exact: bool = False
    quantization: Literal["none", "int8"] = "none"
    on_disk: bool = False
    shard_number: int = Field(default=1, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    upsert_batch_size: int = Field(default=256, ge=1)

    @model_validator(mode="after")
    def _one_location(self) -> QdrantConfig:
        if self.url and self.local_path:
            raise ValueError("set either qdrant.url or qdrant.local_path, not both")
        return self


class StoresConfig(Section):
    """``topology`` picks a registered store layout: ``embedded`` (qdrant-edge in-process),
    ``qdrant`` (a Qdrant server holds dense, SPLADE and BM25 vectors) or ``opensearch+qdrant``
    (BM25 and SPLADE in OpenSearch, dense in Qdrant)."""

    topology: str = "embedded"
    # On a model change, create a new index/collection version behind the alias instead of
    # refusing to start (re-ingest afterwards; the old version is kept for rollback).
    migrate: bool = False
    embedded: EmbeddedStoreConfig = Field(default_factory=EmbeddedStoreConfig)
    opensearch: OpenSearchConfig = Field(default_factory=OpenSearchConfig)
    qdrant: QdrantConfig = Field(default_factory=QdrantConfig)

    @model_validator(mode="after")
    def _endpoints(self) -> StoresConfig:
        if self.topology in ("qdrant", "opensearch+qdrant") and not (
            self.qdrant.url or self.qdrant.local_path
        ):
            raise ValueError(f"stores.topology {self.topology!r} needs stores.qdrant.url")
        if self.topology == "opensearch+qdrant" and not self.opensearch.hosts:
            raise ValueError("stores.topology 'opensearch+qdrant' needs stores.opensearch.hosts")
        return self
