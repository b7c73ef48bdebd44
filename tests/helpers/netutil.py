"""Loopback helpers shared by the tests that start servers: free ports, whether one listens, a raw
exchange with one.

Under pytest-xdist (PYTEST_XDIST_WORKER=gw<K>) each worker takes ports from its own slice below
the kernel's ephemeral range, in turn: a port that one worker's server has just released (a unit
restarting) is never handed to another worker's test, and neither bind(0) nor an outgoing
connection can take a port that a test has chosen but not bound yet. Outside xdist (or with more
workers than slices) the kernel picks, as before: bind(0)."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

SLICE = 1000  # ports per worker
FLOOR = 10000  # slices start here and end below the ephemeral range


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1."""
    pool = _worker_pool()
    return _from_pool(pool, n) if pool else _from_kernel(n)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def exchange(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """Send raw `data` to 127.0.0.1:`port` and read until the server closes the connection: what a
    client library would not send, and proof that the server closed (a recv past `timeout` fails)."""
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        while chunk := s.recv(65536):
            got += chunk
    return got


def _from_kernel(n: int) -> list[int]:
    """All bound at once, so they differ."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class _Pool:
    """This worker's slice, walked round from a random start (another xdist run on the same
    machine starts elsewhere in it); a port that cannot be bound now is skipped."""

    def __init__(self, ports: range) -> None:
        self.ports = ports
        self.cursor = random.randrange(len(ports))

    def take(self) -> int:
        for _ in range(len(self.ports)):
            port = self.ports[self.cursor]
            self.cursor = (self.cursor + 1) % len(self.ports)
            if _bindable(port):
                return port
        raise RuntimeError(f"netutil: no free port in {self.ports.start}-{self.ports.stop - 1} (close some servers)")


_POOL: list[_Pool] = []


def _worker_pool() -> _Pool | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not (worker.startswith("gw") and worker[2:].isdigit()):
        return None
    if not _POOL:
        start = FLOOR + int(worker[2:]) * SLICE
        if start + SLICE > _ephemeral_low():
            return None
        _POOL.append(_Pool(range(start, start + SLICE)))
    return _POOL[0]


def _from_pool(pool: _Pool, n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        port = pool.take()
        if port not in ports:
            ports.append(port)
    return ports


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
