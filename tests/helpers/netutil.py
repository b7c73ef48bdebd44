"""Loopback helpers shared by the tests that start servers: free ports, and whether one listens."""

from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (all bound at once, so they differ)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0
