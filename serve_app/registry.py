"""Name -> factory registries, so configuration picks components by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from serve_app.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """A named set of factories; ``field`` is the config path shown in errors."""

    def __init__(self, kind: str, field: str) -> None:
        self.kind = kind
        self.field = field
        self._factories: dict[str, Callable[..., T]] = {}

    def register(self, name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def decorate(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._factories:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._factories[name] = factory
            return factory

        return decorate

    def names(self) -> list[str]:
        return sorted(self._factories)

    def get(self, name: str) -> Callable[..., T]:
        try:
            return self._factories[name]
        except KeyError:
            raise ConfigError(
                f"{self.field}: unknown {self.kind} {name!r}; known: {', '.join(self.names())}"
            ) from None

    def create(self, name: str, *args: object, **kwargs: object) -> T:
        return self.get(name)(*args, **kwargs)
