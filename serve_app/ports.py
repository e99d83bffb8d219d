"""Choosing a free TCP port for a server that binds it later."""

from __future__ import annotations

import random
import socket
from collections.abc import Container
from pathlib import Path

RAY_WORKER_PORTS = range(10002, 20000)
"""Ray's default ``min_worker_port``..``max_worker_port``: its workers bind these."""


def free_port(host: str = "0.0.0.0", avoid: Container[int] = ()) -> int:
    """A port that is free now and that nothing on this machine takes by itself meanwhile.

    A port from the kernel's ephemeral range (what binding port 0 gives) can be taken, between
    the choice and the server's bind, as the local end of any outgoing connection. Ray opens
    many while it starts, and HAProxy binds the Serve port seconds later: seen in CI as
    "cannot bind socket (Address already in use)". Above that range Ray picks its own ports
    at random (``Node._get_unused_port``: from the ephemeral port it got up to 65535). So the
    port comes from between Ray's worker ports and the ephemeral range (20000-32767 on
    Linux's defaults), where only an explicit bind lands. Checked on every interface by
    default, as HAProxy binds them all for its stats and metrics listeners. ``avoid`` holds
    ports already handed to servers that have not bound them yet.
    """
    return free_port_range(1, host, avoid).start


def free_port_range(size: int, host: str = "0.0.0.0", avoid: Container[int] = ()) -> range:
    """``size`` consecutive ports, each free now, chosen as ``free_port`` chooses one."""
    low, high = ephemeral_range()
    space = range(RAY_WORKER_PORTS.stop, low)
    if len(space) < 1024:  # a kernel range set unusually low: the ports above it
        space = range(max(high + 1, RAY_WORKER_PORTS.stop), 65536)
    bases = [
        base
        for base in range(space.start, space.stop - size + 1)
        if base not in avoid and base + size - 1 not in avoid
    ]
    for base in random.sample(bases, min(64, len(bases))):
        ports = range(base, base + size)
        if all(port not in avoid and _bindable(host, port) for port in ports):
            return ports
    raise RuntimeError(f"no {size} free consecutive ports outside the ranges others choose from")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (and of port 0)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
