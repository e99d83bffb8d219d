"""Choosing a free TCP port for a server that binds it later."""

from __future__ import annotations

import random
import socket
from pathlib import Path

RAY_WORKER_PORTS = range(10002, 20000)
"""Ray's default ``min_worker_port``..``max_worker_port``: its workers bind these."""


def free_port(host: str = "0.0.0.0") -> int:
    """A port that is free now and that nothing on this machine takes by itself meanwhile.

    A port from the kernel's ephemeral range (what binding port 0 gives) can be taken, between
    the choice and the server's bind, as the local end of any outgoing connection. Ray opens
    many while it starts, and HAProxy binds the Serve port seconds later: seen in CI as
    "cannot bind socket (Address already in use)". So the port comes from 20000-65535 outside
    the ephemeral range, where only an explicit bind lands. Checked on every interface by
    default, as HAProxy binds them all for its stats and metrics listeners.
    """
    low, high = ephemeral_range()
    candidates = [port for port in range(RAY_WORKER_PORTS.stop, 65536) if not low <= port <= high]
    for port in random.sample(candidates, min(64, len(candidates))):
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port outside the ephemeral range")


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (and of port 0)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
