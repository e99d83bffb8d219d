"""What a web browser may make the API do: the rules against pages of other origins.

A browser sends some cross-origin requests without asking first (CORS "simple" requests: a
form's multipart POST, a ``fetch`` whose body has no type), and a page can rebind its own name
to 127.0.0.1 so that it is same-origin with a local run. With ``api.auth.mode: none`` the
local run's anonymous principal is an admin, so either would let any web page a person opens
write, steer and delete the index. Two rules close that, on every route:

- ``Host`` must name the service (``api.allowed_hosts``; on a loopback bind, by default, the
  loopback names only): a rebound name is refused 400 ``INVALID_HOST``.
- a request that says it comes from a page (``Origin``) must come from the API's own origin
  (the ``Origin`` names the ``Host``) or from one of ``api.allowed_origins``; a write without
  ``Origin`` that a browser marks as sent by another site (``Sec-Fetch-Site``) is refused
  too: 403 ``CROSS_ORIGIN``.

Clients that are not browsers send neither header and are not affected.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from serve_app.config.api import is_loopback
from serve_app.errors import CrossOriginError, InvalidHostError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OTHER_SITES = frozenset({"cross-site", "same-site"})


def host_name(host: str) -> str:
    """``Host`` without its port, lower case (``[::1]:8500`` is ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _origin(value: str) -> str:
    """An origin as compared: scheme://host[:port], lower case, no trailing slash."""
    return value.strip().lower().rstrip("/")


class BrowserRules:
    """The two rules for one service: ``bind`` is the address it serves on (None: unknown,
    no Host rule unless ``allowed_hosts`` is set)."""

    def __init__(
        self, allowed_hosts: list[str] | None, allowed_origins: list[str], bind: str | None
    ) -> None:
        if allowed_hosts is None and bind is not None and is_loopback(bind):
            allowed_hosts = [*LOOPBACK_NAMES, bind]
        self.hosts = None if allowed_hosts is None else {host_name(h) for h in allowed_hosts}
        if self.hosts is not None and "*" in self.hosts:
            self.hosts = None
        self.origins = {_origin(o) for o in allowed_origins}

    def check(
        self, method: str, host: str | None, origin: str | None, fetch_site: str | None
    ) -> None:
        """InvalidHostError or CrossOriginError when the request breaks a rule."""
        if self.hosts is not None and host is not None and host_name(host) not in self.hosts:
            raise InvalidHostError(
                f"this service does not answer to the host {host_name(host)[:100]!r} "
                "(api.allowed_hosts)"
            )
        if origin is not None:
            if "*" in self.origins or _origin(origin) in self.origins:
                return
            if host is not None and urlsplit(_origin(origin)).netloc == host.strip().lower():
                return
            raise CrossOriginError(
                f"requests from pages of {origin[:100]!r} are not allowed (api.allowed_origins)"
            )
        if method not in SAFE_METHODS and (fetch_site or "").lower() in OTHER_SITES:
            raise CrossOriginError(
                "a write sent by a page of another site is not allowed (api.allowed_origins)"
            )
