"""free_port: a port nothing takes by itself between its choice and a server's later bind."""

from __future__ import annotations

import socket

from serve_app import ports
from serve_app.ports import RAY_WORKER_PORTS, ephemeral_range, free_port


def test_free_port_is_outside_the_ranges_the_kernel_and_ray_hand_out():
    low, high = ephemeral_range()
    for _ in range(50):
        port = free_port()
        assert not low <= port <= high
        assert port not in RAY_WORKER_PORTS and port > 1024
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free on loopback too, not only on 0.0.0.0


def test_free_port_passes_over_a_port_someone_listens_on(monkeypatch):
    with socket.socket() as listener:
        taken = free_port()
        listener.bind(("127.0.0.1", taken))
        listener.listen()
        other = free_port()
        monkeypatch.setattr(ports.random, "sample", lambda population, k: [taken, other])
        assert free_port() == other
