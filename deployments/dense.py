"""The dense embedder deployment: one model per replica behind its queue (two lanes)."""

from __future__ import annotations

from typing import Any

import numpy as np
from ray import serve

from deployments.options import ConfiguredDeployment
from deployments.replica_logging import configure_replica_logging
from deployments.settings import ServiceConfig
from deployments.tokenizer_threads import tokenize_on_reserved_cpus
from serve_app.encoders.base import DENSE_BACKENDS, LaneDenseEncoder
from serve_app.encoders.queue import Lane
from serve_app.errors import ConfigError
from serve_app.pipelines.components import dense_model_revision


@serve.deployment(name="dense")
class DenseDeployment(ConfiguredDeployment):
    settings_name = "dense"

    """Loads the dense model once per replica. Each call carries a lane (``query`` or
    ``document``) and a list of texts; concurrent calls share model batches through the
    encoder's queue, queries first, so a search never waits behind more than one document
    batch. Returns the vectors and the batch's statistics."""

    def __init__(self, config: ServiceConfig) -> None:
        configure_replica_logging()
        self.config = config
        tokenize_on_reserved_cpus(config.serve.dense.num_cpus)
        # A model cache holding another commit than configured: refused before loading.
        self.revision = dense_model_revision(self.config)
        encoder = DENSE_BACKENDS.create(self.config.dense.backend, self.config.dense)
        if not isinstance(encoder, LaneDenseEncoder):
            raise ConfigError(f"dense.backend {self.config.dense.backend!r} cannot be served")
        self.encoder: LaneDenseEncoder = encoder

    def info(self) -> dict[str, Any]:
        return {
            "model_id": self.encoder.model_id,
            "dim": self.encoder.dim,
            "revision": self.revision,
            "backend": self.config.dense.backend,
            "encoder": type(self.encoder).__name__,
        }

    def ping(self) -> str:
        return "ok"

    async def embed(self, mode: Lane, texts: list[str]) -> tuple[np.ndarray, dict]:
        return await self.encoder.encode_lane(mode, texts)

    def check_health(self) -> None:
        if self.encoder is None:
            raise RuntimeError("dense model not loaded")

    def __del__(self) -> None:
        # The queue's worker thread and, for vLLM, the engine process stop with the replica.
        close = getattr(getattr(self, "encoder", None), "close", None)
        if close is not None:
            close()
