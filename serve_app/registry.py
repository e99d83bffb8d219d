"""Name -> factory registries, so configuration picks components by name."""

from __future__ import annotations

import importlib
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
        self._lazy: dict[str, str] = {}
        self._install: dict[str, str] = {}

    def register(self, name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        def decorate(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._factories:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._factories[name] = factory
            return factory

        return decorate

    def register_lazy(self, name: str, target: str, install: str = "") -> None:
        """``target`` is ``module:attribute``, imported on first use: a component whose
        dependencies live in an optional extra costs nothing until the configuration names it
        (``install`` says how to get them when they are missing)."""
        if name in self._factories or name in self._lazy:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._lazy[name] = target
        self._install[name] = install

    def names(self) -> list[str]:
        return sorted({*self._factories, *self._lazy})

    def get(self, name: str) -> Callable[..., T]:
        if name not in self._factories and name in self._lazy:
            module, _, attribute = self._lazy[name].partition(":")
            try:
                loaded = importlib.import_module(module)
            except ModuleNotFoundError as error:
                hint = f"; {self._install[name]}" if self._install[name] else ""
                raise ConfigError(
                    f"{self.field}: {self.kind} {name!r} needs a package that is not "
                    f"installed ({error}){hint}"
                ) from None
            self._factories[name] = getattr(loaded, attribute)
        try:
            return self._factories[name]
        except KeyError:
            raise ConfigError(
                f"{self.field}: unknown {self.kind} {name!r}; known: {', '.join(self.names())}"
            ) from None

    def create(self, name: str, *args: object, **kwargs: object) -> T:
        return self.get(name)(*args, **kwargs)
