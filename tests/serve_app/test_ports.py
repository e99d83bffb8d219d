"""free_port: a port nothing takes by itself between its choice and a server's later bind."""

from __future__ import annotations

import socket

from serve_app import ports
from serve_app.ports import RAY_WORKER_PORTS, ephemeral_range, free_port, free_port_range


def test_free_port_is_outside_the_ranges_the_kernel_and_ray_hand_out():
    low, _ = ephemeral_range()
    for _ in range(50):
        port = free_port()
        assert port < low  # above the range, Ray chooses ports of its own at random
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


def test_free_port_range_is_free_outside_the_kernel_range_and_what_to_avoid():
    low, _ = ephemeral_range()
    avoid = set(range(20000, 30000))  # leaves 30000-32767 on the defaults
    for _ in range(20):
        chosen = free_port_range(65, avoid=avoid)
        assert len(chosen) == 65
        assert not any(port >= low or port in avoid for port in chosen)
        for port in chosen:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", port))


def test_free_port_range_steps_over_a_port_someone_listens_on(monkeypatch):
    with socket.socket() as listener:
        taken = free_port()
        listener.bind(("0.0.0.0", taken))
        listener.listen()
        monkeypatch.setattr(ports.random, "sample", lambda population, k: [taken - 2, taken + 1])
        assert free_port_range(3) == range(taken + 1, taken + 4)
