"""isolate: the ports a local run chooses never overlap each other or the service's port."""

from __future__ import annotations

import pytest

from deployments.local.instance import isolate
from serve_app import ports


def chosen_ports(environ: dict[str, str]) -> tuple[list[int], list[range]]:
    singles = [
        int(value)
        for key, value in environ.items()
        if key.endswith("_PORT") and "DIRECT_INGRESS" not in key
    ]
    ranges = [
        range(
            int(environ[f"RAY_SERVE_DIRECT_INGRESS_MIN_{p}_PORT"]),
            int(environ[f"RAY_SERVE_DIRECT_INGRESS_MAX_{p}_PORT"]) + 1,
        )
        for p in ("HTTP", "GRPC")
    ]
    return singles, ranges


def assert_apart(environ: dict[str, str], reserved: int) -> None:
    singles, ranges = chosen_ports(environ)
    assert len(singles) == 6 and len(set(singles)) == len(singles), singles
    every = [*singles, reserved]
    for r in ranges:
        assert len(r) == 65
        assert not any(port in r for port in every), (r, every)
    assert not set(ranges[0]) & set(ranges[1])
    assert reserved not in singles


@pytest.fixture
def lowest_first(monkeypatch):
    """The choice made as adversarial as it can be: always the lowest candidates first, so
    every port lands next to the last one unless the chooser steps over what it handed out."""
    monkeypatch.setattr(ports.random, "sample", lambda population, k: sorted(population)[:k])


def test_ports_of_a_run_stay_apart_when_the_choice_clusters(lowest_first, tmp_path):
    low = ports.RAY_WORKER_PORTS.stop
    environ: dict[str, str] = {}
    instance = isolate("127.0.0.1", environ, reserved={low + 3})
    try:
        assert_apart(environ, low + 3)
        assert instance.ports >= {int(v) for v in environ.values() if v.isdigit()} - {0}
    finally:
        instance.remove_files()


def test_ports_of_a_run_stay_apart_at_random():
    for _ in range(30):
        environ: dict[str, str] = {}
        reserved = ports.free_port()
        instance = isolate("127.0.0.1", environ, reserved={reserved})
        try:
            assert_apart(environ, reserved)
        finally:
            instance.remove_files()


def test_a_port_the_user_set_is_kept():
    environ = {"DASHBOARD_METRIC_PORT": "1234"}
    instance = isolate("127.0.0.1", environ)
    try:
        assert environ["DASHBOARD_METRIC_PORT"] == "1234"
        assert "DASHBOARD_METRIC_PORT" not in instance.environment
    finally:
        instance.remove_files()


@pytest.mark.parametrize(("seconds", "rendered"), [(2.5, "2500ms"), (5, "5000ms"), (0.0001, "1ms")])
def test_the_haproxy_header_timeout_is_integer_milliseconds(seconds, rendered):
    # HAProxy's time values are integers with a unit: "2.5s" stopped it from starting.
    from deployments.local.instance import _HTTP_REQUEST_TIMEOUT, haproxy_header_timeout

    template = f"defaults\n  {_HTTP_REQUEST_TIMEOUT}\n"
    assert f"timeout http-request {rendered}\n" in haproxy_header_timeout(template, seconds)


def test_the_haproxy_admin_socket_is_the_runs_own(tmp_path):
    """Ray's template opens HAProxy's admin socket (level admin) to every local user."""
    from ray.serve._private.haproxy_templates import HAPROXY_CONFIG_TEMPLATE

    from deployments.local.instance import haproxy_private_admin_socket

    assert "mode 666 level admin" in HAPROXY_CONFIG_TEMPLATE
    private = haproxy_private_admin_socket(HAPROXY_CONFIG_TEMPLATE)
    assert "mode 666" not in private and "mode 600 level admin" in private
    assert haproxy_private_admin_socket(private) == private


def test_haproxy_sets_the_forwarded_headers_itself_and_has_no_stats_page():
    from ray.serve._private import haproxy

    from deployments.local.instance import haproxy_own_forwarded_for, haproxy_without_stats_page

    rendered = haproxy_own_forwarded_for(haproxy.HAPROXY_CONFIG_TEMPLATE)
    frontend = rendered[rendered.index("frontend http_frontend") :]
    assert "http-request set-header X-Serve-App-Client %[src]\n" in frontend
    assert haproxy_own_forwarded_for(rendered) == rendered  # once per process
    assert "listen stats" in rendered
    bare = haproxy_without_stats_page(rendered)
    assert "listen stats" not in bare and "stats enable" not in bare
    assert haproxy_without_stats_page(bare) == bare
