"""What a served component says about itself when a caller asks (``info()`` of the model,
LLM and store deployments, read by the handles that stand for them in the ingress): typed,
so a reader knows every field and a missing one fails where it is made, not where it is read.
The models pickle (they cross a Ray handle); ``model_dump()`` is the dict they replaced."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from serve_app.schemas import Strategy


class _Info(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelInfo(_Info):
    """A model deployment (the sparse encoder, the reranker): the model it serves."""

    model_id: str


class DenseInfo(ModelInfo):
    """The dense encoder deployment: its model, the vectors' dimension, the commit of the
    weights its replicas loaded (None where not pinned), its backend and encoder class."""

    dim: int
    revision: str | None
    backend: str
    encoder: str


class LLMInfo(ModelInfo):
    """The LLM deployment: its model, engine backend and slots per replica."""

    backend: str
    parallel: int


class StoreInfo(_Info):
    """The store deployment: the retrieval strategies its index serves and the models it was
    opened for (``IndexModels.as_dict``)."""

    strategies: list[Strategy]
    models: dict[str, Any]
