"""What every replica of the application's deployments does at start, for Serve's pings and
health checks, and when it stops; each deployment adds only its model and its calls.

``Replica``: the replica's logging, its tokenizer threads (the CPUs Ray reserved for it) and
the parsed configuration it was bound to. ``ModelReplica``: a replica that holds one model
for its lifetime (loaded at start, asked for its health by Serve every period, closed when
the replica stops): a model that can no longer answer fails the check, and Serve replaces
the replica."""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar, Generic, Protocol, TypeVar

from deployments.replicas.logs import configure_replica_logging
from deployments.replicas.options import ConfiguredDeployment
from deployments.replicas.tokenizer_threads import tokenize_on_reserved_cpus
from deployments.settings import ServiceConfig


class HeldModel(Protocol):
    async def check_health(self) -> None:
        """ServiceUnavailableError once the model cannot answer."""
        ...

    def close(self) -> None: ...


M = TypeVar("M", bound=HeldModel)


class Replica(ConfiguredDeployment):
    # Whether the replica tokenizes whole batches (the chunker and the encoders): its
    # tokenizers then use the CPUs reserved for it (deployments/replicas/tokenizer_threads.py).
    tokenizes: ClassVar[bool] = True

    def __init__(self, config: ServiceConfig) -> None:
        configure_replica_logging()
        self.config = config
        if self.tokenizes:
            tokenize_on_reserved_cpus(getattr(config.serve, self.settings_name).num_cpus)

    def ping(self) -> str:
        """Answered by the replica itself: callers wait for deployments with it."""
        return "ok"


class ModelReplica(Replica, Generic[M]):
    def __init__(self, config: ServiceConfig) -> None:
        super().__init__(config)
        self.model: M = self.load()

    @abstractmethod
    def load(self) -> M:
        """The model, loaded (a model cache at another revision is refused before)."""

    async def check_health(self) -> None:
        await self.model.check_health()

    def __del__(self) -> None:
        # The queue's worker threads and an engine's process stop with the replica; a
        # replica whose load failed has no model.
        model = getattr(self, "model", None)
        if model is not None:
            model.close()
