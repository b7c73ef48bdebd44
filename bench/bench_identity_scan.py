"""What the local identity check (edges.identity.scan_here, beside every trial's repro on the
controller) pays to find the listeners on the deployment's ports: /proc/net/tcp and tcp6 (before)
beside sock_diag netlink (edges.sockdiag, after), side by side in one run, with this machine's
connected TCP sockets as they are and with --connections more held open on loopback (a busy
controller: the /proc read of a family without listeners walks every connected socket).

    python bench/bench_identity_scan.py [--scans 300] [--connections 0,2000]

Printed per setting: the TCP sockets /proc lists, the median and p90 ms of one lookup each way
(the same two ports, an IPv4 and an IPv6 listener), and their ratio; then scan_here end to end
(its holders looked for in this process first, as the local manager looks in the unit's own), in
the first setting only: held connections are this process's fds, and the holder search reads them.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack

from orchestrator.edges import identity, sockdiag


def by_netlink(ports: list[int]) -> list[identity.Socket]:
    found = sockdiag.listening(set(ports))
    assert found is not None, "netlink refused here"
    return [identity.Socket(*s) for s in found]


def timed(fn: Callable[[], object], scans: int) -> list[float]:
    times = []
    for _ in range(scans):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return times


def tcp_rows() -> int:
    with open("/proc/net/tcp") as v4, open("/proc/net/tcp6") as v6:
        return sum(1 for _ in v4) + sum(1 for _ in v6) - 2


def hold(stack: ExitStack, server: socket.socket, n: int) -> None:
    """n connected pairs on loopback (client and accepted end), held until the stack closes."""
    for _ in range(n):
        stack.enter_context(socket.create_connection(server.getsockname()))
        stack.enter_context(server.accept()[0])


def row(label: str, before: list[float], after: list[float]) -> str:
    b, a = statistics.median(before), statistics.median(after)
    p90 = lambda xs: statistics.quantiles(xs, n=10)[-1]  # noqa: E731
    return f"{label:<34} {b:8.3f} {p90(before):8.3f} {a:8.3f} {p90(after):8.3f} {b / a:8.1f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scans", type=int, default=300)
    ap.add_argument("--connections", default="0,2000", help="extra loopback connections held open, per setting")
    args = ap.parse_args()
    with ExitStack() as stack:
        v4 = stack.enter_context(socket.socket(socket.AF_INET))
        v4.bind(("127.0.0.1", 0))
        v4.listen(4096)
        ports = [v4.getsockname()[1]]
        try:  # and an IPv6 one where the machine has an IPv6 loopback
            v6 = stack.enter_context(socket.socket(socket.AF_INET6))
            v6.bind(("::1", 0))
            v6.listen()
            ports.append(v6.getsockname()[1])
        except OSError:
            print("no IPv6 loopback here: one IPv4 listener only")
        assert sorted(identity.listening_in_proc(ports), key=str) == sorted(by_netlink(ports), key=str)
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; ms per lookup (median, p90)")
        print(f"{'':<34} {'/proc':>8} {'p90':>8} {'netlink':>8} {'p90':>8} {'ratio':>9}")
        held = 0
        for extra in (int(x) for x in args.connections.split(",")):
            hold(stack, v4, extra - held)
            held = extra
            label = f"{tcp_rows()} TCP sockets (+{extra} held)"
            print(
                row(
                    label,
                    timed(lambda: identity.listening_in_proc(ports), args.scans),
                    timed(lambda: by_netlink(ports), args.scans),
                )
            )
            if extra:  # the held sockets are this process's fds, which the holder search reads: not a lookup's cost
                continue
            real = sockdiag.listening
            before = timed(lambda: identity.scan_here(ports, [os.getpid()]), args.scans // 3)
            sockdiag.listening = lambda ports: None  # type: ignore[assignment]  # scan_here's /proc way
            try:
                proc_way = timed(lambda: identity.scan_here(ports, [os.getpid()]), args.scans // 3)
            finally:
                sockdiag.listening = real  # type: ignore[assignment]
            print(row("  scan_here end to end", proc_way, before))


if __name__ == "__main__":
    main()
