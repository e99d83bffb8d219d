"""The edge (``serve_app.api.edge``) on Ray Serve's own HTTP servers.

Ray Serve answers some requests before the app runs: an ingress replica's direct-ingress
server (behind HAProxy) and Serve's Python proxy decode ``X-Request-ID`` as UTF-8 and use it
as the request id, so a non-UTF-8 id failed inside Serve (``replica.py``,
``_direct_ingress_asgi``: ``UnicodeDecodeError``) and uvicorn answered a plain-text 500.
Serve wraps every HTTP server it starts in the Starlette middlewares that the function
named by ``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH`` returns (``http_util.
configure_http_middlewares``, in the proxy and in each direct-ingress replica): that is this
module's ``http_middlewares``, set in ``serve.env`` by default (``deployments.settings``), so
the edge sees the raw headers and body before Serve does.
"""

from __future__ import annotations

import os

from starlette.middleware import Middleware

from deployments.replicas.logs import configure_replica_logging
from deployments.settings import CLIENT_HEADER, HAPROXY_HOOK_ENV
from serve_app.api.edge import Edge
from serve_app.config import ApiConfig

CALLBACK_ENV = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
HAPROXY_ENV = "RAY_SERVE_ENABLE_HA_PROXY"
CALLBACK = "deployments.replicas.edge.http_middlewares"

_configured: list[ApiConfig] = []


def use_api(api: ApiConfig) -> None:
    """The ingress replica's ``api`` section (its connection budget and body limits), for its
    direct-ingress server's edge (the replica's constructor runs before Serve starts that
    server)."""
    _configured[:] = [api]


def current_api() -> ApiConfig:
    """The configured section; in Serve's Python proxy (no configuration there) the defaults,
    and the app's own edge in the replica applies the configured one behind it."""
    return _configured[0] if _configured else ApiConfig()


def http_middlewares() -> list[Middleware]:
    """Serve's HTTP proxy callback: the edge outermost, its access lines on the process's own
    stderr as they happen (``deployments.replicas.logs``)."""
    configure_replica_logging(access_log=True)
    return [
        Middleware(
            Edge, api=current_api, log_passed=in_ingress_replica, client_header=client_header()
        )
    ]


def client_header() -> str | None:
    """``X-Serve-App-Client`` where Serve's HAProxy is in front and sets it on every request
    (its template hardened: deployments.process_hook); None elsewhere, where a client could
    send it itself."""
    hardened = os.environ.get(HAPROXY_HOOK_ENV) == "1"
    return CLIENT_HEADER if hardened and os.environ.get(HAPROXY_ENV) == "1" else None


def in_ingress_replica() -> bool:
    """Whether this process is an ingress replica (its constructor handed the budget in);
    otherwise Serve's Python proxy, which passes requests on to a replica whose app's edge
    writes their access line, and writes only those it refuses itself."""
    return bool(_configured)
