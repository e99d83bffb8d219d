"""Ray Serve's HAProxy configuration hardened in a cluster's Ray pods, where no setting of
Ray's reaches it: the image's install writes ``serve_app_process_hook.pth`` (a line that
calls ``install``) into its site-packages, and the chart sets ``SERVE_APP_HAPROXY_HOOK=1`` on
the Ray containers. When Serve then loads its HAProxy module, the template gets what a local
run's worker setup hook gives it (``deployments.local.instance.bind_haproxy_admin_listeners``):
the header timeout, a private admin socket, no stats page, ``X-Forwarded-For`` set by HAProxy
itself. A process without the variable pays one environment lookup."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

# deployments.settings.HAPROXY_HOOK_ENV, written out: this module runs at every interpreter
# start in the image, and the settings module imports the whole configuration model.
HOOK_ENV = "SERVE_APP_HAPROXY_HOOK"
TARGET = "ray.serve._private.haproxy"


def harden() -> None:
    from deployments.local.instance import bind_haproxy_admin_listeners

    bind_haproxy_admin_listeners()


class _HardenedLoader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        harden()


class _AfterLoad(importlib.abc.MetaPathFinder):
    """Finds Serve's HAProxy module as Python would, and hardens it once it has run."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _HardenedLoader(spec.loader)
        return spec


def install() -> None:
    if os.environ.get(HOOK_ENV) != "1":
        return
    if TARGET in sys.modules:
        harden()
    elif not any(isinstance(finder, _AfterLoad) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterLoad())
