"""The application's configuration: every section of the library, the rules between them
(one validator), and the Ray Serve layer's own section carried through unread (that layer
types it: ``deployments.settings.ServiceConfig``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from serve_app.config.answer import AnswerConfig
from serve_app.config.api import ApiConfig, LimitsConfig
from serve_app.config.base import Section
from serve_app.config.models import (
    Bm25Config,
    ChunkerConfig,
    DenseConfig,
    LlmConfig,
    RerankerConfig,
    SpladeConfig,
)
from serve_app.config.search import SearchConfig
from serve_app.config.stores import StoresConfig
from serve_app.schemas import Strategy


class AppConfig(Section):
    data_dir: str = ".data"
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    chunker: ChunkerConfig = Field(default_factory=ChunkerConfig)
    dense: DenseConfig = Field(default_factory=DenseConfig)
    splade: SpladeConfig = Field(default_factory=SpladeConfig)
    bm25: Bm25Config = Field(default_factory=Bm25Config)
    reranker: RerankerConfig = Field(default_factory=RerankerConfig)
    stores: StoresConfig = Field(default_factory=StoresConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    api: ApiConfig = Field(default_factory=ApiConfig)
    llm: LlmConfig = Field(default_factory=LlmConfig)
    answer: AnswerConfig = Field(default_factory=AnswerConfig)
    # The Ray Serve layer's own section (replicas, resources, transport, the HTTP bind): a
    # mapping kept as given here, so the library's own commands load any file; that layer's
    # extension of this model (deployments/settings.py) types it and checks it once at start.
    serve: Any = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> AppConfig:
        """Every rule between the library's sections (a field's own bounds are its own)."""
        self._components_exist()
        if self.chunker.max_tokens > self.dense.max_length:
            raise ValueError(
                f"chunker.max_tokens ({self.chunker.max_tokens}) exceeds dense.max_length "
                f"({self.dense.max_length}): chunks would be truncated by the dense model"
            )
        enabled = self.enabled_strategies()
        missing = [s for s in self.search.strategies if s not in enabled]
        if missing:
            raise ValueError(f"search.strategies names disabled strategies: {missing}")
        if self.search.rerank and not self.reranker.enabled:
            raise ValueError("search.rerank is true but reranker.enabled is false")
        worst = self.answer.worst_prompt_tokens()
        if self.llm.enabled and worst["total"] > self.llm.context_tokens:
            raise ValueError(
                f"the default answer prompt can take {worst['total']} tokens ({worst}) but "
                f"llm.context_tokens is {self.llm.context_tokens}: lower answer.top_k, "
                "answer.max_passage_tokens, answer.history_tokens, answer.max_question_tokens "
                "or answer.max_tokens, or raise llm.context_tokens"
            )
        return self

    def _components_exist(self) -> None:
        """Each component the configuration names by name is registered (nothing imported)."""
        from serve_app.chunking.base import CHUNKERS
        from serve_app.encoders.base import DENSE_BACKENDS, RERANKER_BACKENDS
        from serve_app.stores.base import TOPOLOGIES

        CHUNKERS.check(self.chunker.name)
        DENSE_BACKENDS.check(self.dense.backend)
        TOPOLOGIES.check(self.stores.topology)
        if self.reranker.enabled:
            RERANKER_BACKENDS.check(self.reranker.backend)
        if self.llm.enabled:
            from serve_app.generation import LLM_BACKENDS

            LLM_BACKENDS.check(self.llm.backend)

    def chunker_tokenizer(self) -> tuple[str, str | None]:
        """The model reference whose tokenizer the chunker counts with, and its revision
        (``chunker.tokenizer_revision``; the dense model's where it is the dense model)."""
        reference = self.chunker.tokenizer or self.dense.model
        revision = self.chunker.tokenizer_revision
        if revision is None and reference == self.dense.model:
            revision = self.dense.revision
        return reference, revision

    def enabled_strategies(self) -> list[Strategy]:
        out: list[Strategy] = []
        if self.bm25.enabled:
            out.append("bm25")
        if self.splade.enabled:
            out.append("splade")
        out.append("dense")
        return out

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser()
