"""Catalogs of named components (name -> factory), so configuration picks components by name.
("Registry" in this code base means one thing: the collection registry, ``stores/registry.py``.)

One way to register: ``register_lazy(name, "module:attribute")`` beside the catalog, so
every name is known without importing anything (a configuration is checked at parse time)
and a component's module, with its dependencies, is imported when it is first used."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar

from serve_app.errors import ConfigError

T = TypeVar("T")


class Catalog(Generic[T]):
    """A named set of factories; ``field`` is the config path shown in errors."""

    def __init__(self, kind: str, field: str) -> None:
        self.kind = kind
        self.field = field
        self._targets: dict[str, str] = {}
        self._install: dict[str, str] = {}
        self._factories: dict[str, Callable[..., T]] = {}

    def register_lazy(self, name: str, target: str, install: str = "") -> None:
        """``target`` is ``module:attribute``, imported on first use: a component whose
        dependencies live in an optional extra costs nothing until the configuration names it
        (``install`` says how to get them when they are missing)."""
        if name in self._targets:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._targets[name] = target
        self._install[name] = install

    def names(self) -> list[str]:
        return sorted(self._targets)

    def check(self, name: str) -> None:
        """ConfigError naming the field unless ``name`` is registered (nothing imported)."""
        if name not in self._targets:
            raise ConfigError(
                f"{self.field}: unknown {self.kind} {name!r}; known: {', '.join(self.names())}"
            )

    def get(self, name: str) -> Callable[..., T]:
        self.check(name)
        if name not in self._factories:
            module, _, attribute = self._targets[name].partition(":")
            try:
                loaded = importlib.import_module(module)
            except ModuleNotFoundError as error:
                hint = f"; {self._install[name]}" if self._install[name] else ""
                raise ConfigError(
                    f"{self.field}: {self.kind} {name!r} needs a package that is not "
                    f"installed ({error}){hint}"
                ) from None
            self._factories[name] = getattr(loaded, attribute)
        return self._factories[name]

    def create(self, name: str, *args: object, **kwargs: object) -> T:
        return self.get(name)(*args, **kwargs)
