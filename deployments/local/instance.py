"""What keeps two local runs on one machine apart: ports, files and Ray's own credentials.

Ray Serve's defaults assume one Serve instance per machine: its fallback proxy (the backup
server behind HAProxy while the app starts) listens on 8500, HAProxy keeps its configuration
and admin socket under ``/tmp/haproxy-serve``, replicas take direct-ingress ports from 30000,
HAProxy's stats and Prometheus listeners use fixed ports on every interface, and Ray's
autoscaler and dashboard export metrics on fixed ports. A second run would reach the first
one's proxy through its own HAProxy (seen: searches answered with the other run's
documents while the new run started). Here every run gets its own ports and files, its
HAProxy's listeners bind the loopback address, and Ray's token authentication is on with a
token of the run's own, so the processes of one run refuse calls from any other.

Ray's own listeners stay on the loopback address too: Ray's single-machine mode (its default
on macOS and Windows, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``) makes the node's address
127.0.0.1, and GCS, the raylet, every worker's gRPC server, the dashboard and runtime-env
agents and the metrics exporters bind that address when it is the loopback one. Ray Serve's
own gRPC servers (each replica's, for calls between deployments, and the direct-ingress one)
bind ``[::]`` whatever the node's address: the setup hook binds them to it
(``bind_serve_grpc_to_node_address``). docs/operations.md has the table.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field

from deployments.settings import CLIENT_HEADER
from serve_app.api.observability import INSTANCE_ENV
from serve_app.ports import free_port, free_port_range

ADMIN_HOST_ENV = "SERVE_APP_HAPROXY_ADMIN_HOST"
LOOPBACK_NODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
HEADER_TIMEOUT_ENV = "SERVE_APP_HEADER_TIMEOUT_S"
CLIENT_CONNECTIONS_ENV = "SERVE_APP_MAX_CONNECTIONS_PER_CLIENT"
SETUP_HOOK = "deployments.local.instance.setup_worker"
_PORT_RANGE = 64  # direct-ingress ports a run may hand its replicas

_HAPROXY_LISTENERS = (
    ("bind :{{ config.metrics_port }}", "bind {host}:{{{{ config.metrics_port }}}}"),
)
# HAProxy's stats page: every backend, server and address, with no authentication, and
# nothing of Ray's reads it (its manager talks to the admin socket): a local run has none.
_STATS_PAGE = (
    "listen stats\n  bind *:{{ config.stats_port }}\n  stats enable\n"
    "  stats uri {{ config.stats_uri }}\n  stats refresh 1s\n"
)


@dataclass
class Instance:
    """One local run: its id, the environment it set and the folder it owns."""

    id: str
    files: str
    environment: dict[str, str] = field(default_factory=dict)
    ports: set[int] = field(default_factory=set)
    """Every port chosen for it (whether or not the user's environment kept it)."""

    def remove_files(self) -> None:
        shutil.rmtree(self.files, ignore_errors=True)


def isolate(
    host: str,
    environ: os._Environ[str] | dict[str, str] = os.environ,
    reserved: Iterable[int] = (),
) -> Instance:
    """Set this run's ports, files and Ray credentials in ``environ`` (Ray's processes
    inherit them); a variable the user set keeps its value. The ports are distinct from each
    other and from ``reserved`` (the service's own port): each is only free when chosen, and
    a metrics port inside the direct-ingress range would take a replica's port."""
    files = tempfile.mkdtemp(prefix="serve-app-")  # short: it holds Unix sockets
    taken = set(reserved)

    def port() -> str:
        chosen = free_port(avoid=taken)
        taken.add(chosen)
        return str(chosen)

    def port_range() -> range:
        chosen = free_port_range(_PORT_RANGE + 1, avoid=taken)
        taken.update(chosen)
        return chosen

    http_range, grpc_range = port_range(), port_range()
    chosen = {
        INSTANCE_ENV: secrets.token_hex(8),
        ADMIN_HOST_ENV: host,
        # Ray's token authentication, with a token only this run's processes know.
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": port(),
        "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT": port(),
        "RAY_SERVE_HAPROXY_STATS_PORT": port(),
        "RAY_SERVE_HAPROXY_METRICS_PORT": port(),
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": f"{files}/haproxy.cfg",
        "RAY_SERVE_HAPROXY_SOCKET_PATH": f"{files}/admin.sock",
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": files,
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": f"{files}/server-state",
        "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": f"{files}/metrics.sock",
        "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(http_range.start),
        "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(http_range.stop - 1),
        "RAY_SERVE_DIRECT_INGRESS_MIN_GRPC_PORT": str(grpc_range.start),
        "RAY_SERVE_DIRECT_INGRESS_MAX_GRPC_PORT": str(grpc_range.stop - 1),
        "AUTOSCALER_METRIC_PORT": port(),
        "DASHBOARD_METRIC_PORT": port(),
        # Ray's single-machine mode: the node's address is 127.0.0.1 (ray._private.services.
        # get_node_ip_address), so Ray's processes listen there (module docstring).
        LOOPBACK_NODE_ENV: "0",
    }
    if environ.get("RAY_AUTH_MODE", "token") != "token":  # the user chose: keep it
        del chosen["RAY_AUTH_MODE"], chosen["RAY_AUTH_TOKEN"]
    applied = {}
    for key, value in chosen.items():
        if key not in environ:
            environ[key] = value
            applied[key] = value
    if "RAY_AUTH_MODE" in applied and "ray" in sys.modules:
        # Ray caches its configuration when first imported: refresh it, as Ray itself does
        # when it turns token authentication on (authentication_token_setup.py).
        from ray._raylet import Config

        Config.initialize("")
    if LOOPBACK_NODE_ENV in applied and "ray" in sys.modules:
        # Read once, when Ray's constants are first imported: a program that imported Ray
        # before starting its run refreshes it here.
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False
    return Instance(environ[INSTANCE_ENV], files, applied, taken)


def haproxy_template(template: str, host: str) -> str:
    """Ray Serve's HAProxy configuration with its Prometheus listener on ``host`` instead of
    every interface; ValueError when the template no longer has it as this expects (a Ray
    upgrade), so the run stops rather than exposing it."""
    for listener, replacement in _HAPROXY_LISTENERS:
        if replacement.format(host=host) in template:
            continue  # already bound here (the hook ran before in this process)
        if listener not in template:
            raise ValueError(
                f"Ray Serve's HAProxy template has no {listener!r}: deployments/local/instance.py "
                "cannot bind HAProxy's metrics listener to the service's host"
            )
        template = template.replace(listener, replacement.format(host=host))
    return template


_HTTP_REQUEST_TIMEOUT = (
    "{% if config.timeout_http_request_s is not none %}timeout http-request "
    "{{ config.timeout_http_request_s }}s{% endif %}"
)


def haproxy_header_timeout(template: str, seconds: float) -> str:
    """Ray Serve's HAProxy configuration with ``timeout http-request`` (the time a client has
    to send its headers; Serve leaves it unset, so HAProxy's client timeout of an hour held a
    slow client). HAProxy answers 408 itself (its own HTML page) and closes the connection."""
    if _HTTP_REQUEST_TIMEOUT not in template:
        if "timeout http-request" in template:
            return template  # already applied in this process
        raise ValueError(
            "Ray Serve's HAProxy template has no 'timeout http-request' line as expected: "
            "deployments/local/instance.py cannot set the header timeout"
        )
    # HAProxy's time values are integers with a unit ("2.5s" is refused): milliseconds.
    milliseconds = max(1, round(seconds * 1000))
    return template.replace(_HTTP_REQUEST_TIMEOUT, f"timeout http-request {milliseconds}ms")


_ADMIN_SOCKET_MODE = ("stats socket {{ config.socket_path }} mode 666", "mode 600")


def haproxy_private_admin_socket(template: str) -> str:
    """Ray Serve's HAProxy configuration with its admin socket (``level admin``: servers
    switched off, maps rewritten) readable and writable by the run's own user only, not by
    every local user (``mode 666``); ValueError when the template no longer has it."""
    line, mode = _ADMIN_SOCKET_MODE
    if line not in template:
        if line.replace("mode 666", mode) in template:
            return template  # already applied in this process
        raise ValueError(
            "Ray Serve's HAProxy template has no admin socket line as expected: "
            "deployments/local/instance.py cannot make the socket private"
        )
    return template.replace(line, line.replace("mode 666", mode))


_FRONTEND = "frontend http_frontend\n    bind {{ config.frontend_host }}:{{ config.frontend_port }}\n"


def haproxy_connections_per_client(template: str, most: int) -> str:
    """Ray Serve's HAProxy configuration with at most ``most`` connections at once per client
    address on the service's frontend (one client holding HAProxy's whole ``maxconn`` of idle
    connections left every other client's requests waiting); ValueError when the template no
    longer has the frontend as this expects."""
    if "track-sc0 src" in template:
        return template  # already applied in this process
    if _FRONTEND not in template:
        raise ValueError(
            "Ray Serve's HAProxy template has no 'frontend http_frontend' as expected: "
            "deployments/local/instance.py cannot cap connections per client"
        )
    rules = (
        "    stick-table type ip size 100k expire 60s store conn_cur\n"
        "    tcp-request connection track-sc0 src\n"
        f"    tcp-request connection reject if {{ sc0_conn_cur gt {most} }}\n"
    )
    return template.replace(_FRONTEND, _FRONTEND + rules)


def haproxy_without_stats_page(template: str) -> str:
    """Ray Serve's HAProxy configuration without its unauthenticated stats page; ValueError
    when the template no longer has it as this expects."""
    if _STATS_PAGE in template:
        return template.replace(_STATS_PAGE, "")
    if "listen stats" in template:
        raise ValueError(
            "Ray Serve's HAProxy template has a stats page this does not know: "
            "deployments/local/instance.py cannot remove it"
        )
    return template  # already removed in this process


TRUSTED_PROXIES_ENV = "SERVE_APP_TRUSTED_PROXIES"


def client_rules(trusted_proxies: str = "") -> str:
    """HAProxy's rules naming the request's client, whatever the client sent: the
    connection's own address, or, from a trusted proxy (``api.trusted_proxies``: CIDRs,
    comma-separated) that sent ``X-Forwarded-For``, the last address that proxy added. It goes
    into ``X-Serve-App-Client`` (which the edge logs) and ``X-Forwarded-For`` (which Serve's
    uvicorn believes from 127.0.0.1, HAProxy's own address: a client's header became the
    access line's ``client``)."""
    header = CLIENT_HEADER
    proxies = " ".join(p.strip() for p in trusted_proxies.split(",") if p.strip())
    if proxies:
        forwarded = "serve_app_trusted_proxy { req.hdr(x-forwarded-for) -m found }"
        named = (
            f"    acl serve_app_trusted_proxy src {proxies}\n"
            f"    http-request set-header {header} %[req.hdr(x-forwarded-for,-1)] if {forwarded}\n"
            f"    http-request set-header {header} %[src] unless {forwarded}\n"
        )
    else:
        named = f"    http-request set-header {header} %[src]\n"
    return named + (
        f"    http-request set-header X-Forwarded-For %[req.hdr({header})]\n"
        "    http-request set-header X-Forwarded-Proto http\n"
        "    http-request del-header Forwarded\n"
    )


def haproxy_own_forwarded_for(template: str, trusted_proxies: str = "") -> str:
    """Ray Serve's HAProxy configuration with ``client_rules`` on its frontend."""
    if f"set-header {CLIENT_HEADER}" in template:
        return template  # already applied in this process
    if _FRONTEND not in template:
        raise ValueError(
            "Ray Serve's HAProxy template has no 'frontend http_frontend' as expected: "
            "deployments/local/instance.py cannot name the client"
        )
    return template.replace(_FRONTEND, _FRONTEND + client_rules(trusted_proxies))


def bind_haproxy_admin_listeners() -> None:
    """In every worker of a local run (Serve's HAProxy manager among them), HAProxy's
    configuration is rendered with its admin socket private, the admin listeners on the
    run's host (Ray Serve has no setting for their address) and the run's header timeout."""
    host = os.environ.get(ADMIN_HOST_ENV)
    header_timeout = os.environ.get(HEADER_TIMEOUT_ENV)
    per_client = os.environ.get(CLIENT_CONNECTIONS_ENV)
    bind_admin = bool(host) and host not in ("0.0.0.0", "::")
    from ray.serve._private import haproxy

    haproxy.HAPROXY_CONFIG_TEMPLATE = haproxy_private_admin_socket(haproxy.HAPROXY_CONFIG_TEMPLATE)
    haproxy.HAPROXY_CONFIG_TEMPLATE = haproxy_own_forwarded_for(
        haproxy.HAPROXY_CONFIG_TEMPLATE, os.environ.get(TRUSTED_PROXIES_ENV, "")
    )
    haproxy.HAPROXY_CONFIG_TEMPLATE = haproxy_without_stats_page(haproxy.HAPROXY_CONFIG_TEMPLATE)
    if per_client:
        haproxy.HAPROXY_CONFIG_TEMPLATE = haproxy_connections_per_client(
            haproxy.HAPROXY_CONFIG_TEMPLATE, int(per_client)
        )

    if bind_admin:
        haproxy.HAPROXY_CONFIG_TEMPLATE = haproxy_template(haproxy.HAPROXY_CONFIG_TEMPLATE, host)
    if header_timeout:
        haproxy.HAPROXY_CONFIG_TEMPLATE = haproxy_header_timeout(
            haproxy.HAPROXY_CONFIG_TEMPLATE, float(header_timeout)
        )


def bind_serve_grpc_to_node_address() -> None:
    """Ray Serve's gRPC servers (each replica's for calls between deployments, the direct
    ingress') on the node's address instead of ``[::]``: the address their callers are given
    (Ray Serve has no setting for it). RuntimeError when Ray Serve no longer binds them
    through the functions wrapped here (a Ray upgrade), so the run stops rather than
    exposing them."""
    from ray._common.network_utils import build_address
    from ray.serve._private import default_impl, replica
    from ray.util import get_node_ip_address

    def on_node_address(bind):
        def bound(server, address: str):
            if address.startswith("[::]:"):
                address = build_address(get_node_ip_address(), int(address.rsplit(":", 1)[1]))
            return bind(server, address)

        bound.wrapped = bind
        return bound

    for module, name in ((replica, "add_port_to_grpc_server"), (default_impl, "add_grpc_address")):
        bind = getattr(module, name, None)
        if bind is None:
            raise RuntimeError(
                f"Ray Serve's {module.__name__} has no {name}: deployments/local/instance.py "
                "cannot bind Ray Serve's gRPC servers to the node's address"
            )
        if not hasattr(bind, "wrapped"):  # once per process
            setattr(module, name, on_node_address(bind))


def setup_worker() -> None:
    """Ray's ``worker_process_setup_hook`` for a local run: every worker binds HAProxy's admin
    listeners to the run's host and Ray Serve's gRPC servers to the node's address."""
    bind_haproxy_admin_listeners()
    bind_serve_grpc_to_node_address()
