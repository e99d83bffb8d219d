"""The dense embedder deployment: one model per replica behind its queue (two lanes)."""

from __future__ import annotations

import numpy as np
from ray import serve

from deployments.replicas.base import ModelReplica
from serve_app.encoders.base import DENSE_BACKENDS, LaneDenseEncoder
from serve_app.encoders.queue import Lane
from serve_app.errors import ConfigError
from serve_app.model_info import DenseInfo
from serve_app.pipelines.components import dense_model_revision


@serve.deployment(name="dense")
class DenseDeployment(ModelReplica[LaneDenseEncoder]):
    """Loads the dense model once per replica. Each call carries a lane (``query`` or
    ``document``) and a list of texts; concurrent calls share model batches through the
    encoder's queue, queries first, so a search never waits behind more than one document
    batch. Returns the vectors and the batch's statistics."""

    settings_name = "dense"

    def load(self) -> LaneDenseEncoder:
        # A model cache holding another commit than configured: refused before loading.
        self.revision = dense_model_revision(self.config)
        dense = self.config.dense
        encoder = DENSE_BACKENDS.create(dense.backend, dense)
        if not isinstance(encoder, LaneDenseEncoder):
            raise ConfigError(f"dense.backend {dense.backend!r} cannot be served")
        return encoder

    def info(self) -> DenseInfo:
        return DenseInfo(
            model_id=self.model.model_id,
            dim=self.model.dim,
            revision=self.revision,
            backend=self.config.dense.backend,
            encoder=type(self.model).__name__,
        )

    async def embed(self, mode: Lane, texts: list[str]) -> tuple[np.ndarray, dict]:
        return await self.model.encode_lane(mode, texts)
