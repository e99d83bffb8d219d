"""Search: which strategies, how many candidates, how they are fused."""

from __future__ import annotations

from pydantic import Field

from serve_app.config.base import Section
from serve_app.schemas import STRATEGIES, FusionMethod, Strategy


class FusionConfig(Section):
    method: FusionMethod = "rrf"
    k: int = Field(default=60, ge=1)
    weights: dict[Strategy, float] = Field(default_factory=dict)


class SearchConfig(Section):
    strategies: list[Strategy] = Field(default_factory=lambda: list(STRATEGIES))
    candidates: int = Field(default=100, ge=1, le=10_000)
    top_k: int = Field(default=10, ge=1)
    rerank: bool = False
    fusion: FusionConfig = Field(default_factory=FusionConfig)
    # Per-method overrides of the defaults, e.g. tuned weights for dbsf.
    fusion_presets: dict[FusionMethod, FusionConfig] = Field(default_factory=dict)
    # Concurrent searches next to the index share one batched search and fetch of at most
    # this many queries (natural batching: a batch runs while the next gathers).
    retrieve_batch: int = Field(default=64, ge=1)
