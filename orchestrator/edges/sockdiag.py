"""The LISTEN TCP sockets on given ports, from the kernel's sock_diag netlink interface (what
`ss -lt` reads), for the local identity check (EDGE: one netlink round trip per address family).

Why: the check beside every trial's repro (edges.identity.scan_here) read /proc/net/tcp and
/proc/net/tcp6. Their listeners come first, but a file with no listener row for the family (tcp6
on most hosts) is only known to be empty once the kernel has walked its whole table of connected
sockets, TIME_WAIT ones included: measured on a 2-core test machine with ~7,400 of them, 5.2 ms of
kernel time a read, ~12 reads a trial (bench/bench_identity_scan.py prints it beside this). A
sock_diag dump asked for the LISTEN state only walks the listening table.

Returns None where the kernel or a sandbox refuses netlink: the caller then reads /proc as before.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

__all__ = ["listening"]

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCP_LISTEN = 10  # the state in an inet_diag_msg
TCPF_LISTEN = 1 << TCP_LISTEN  # the states asked for, as a mask
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_REQUEST = struct.Struct("=BBBBI48x")  # inet_diag_req_v2: family, protocol, ext, pad, states, sockid
# inet_diag_msg (72 bytes): family, state, timer, retrans (1 byte each); sockid: source port at 4
# (big-endian), destination port, addresses, interface, cookie; expires, rqueue, wqueue; uid at 64
# and inode at 68 (host order)
_MESSAGE_SIZE = 72
_UID_INODE = struct.Struct("=II")
_BUFFER = 1 << 16
_MAX_MESSAGES = 100_000  # a bound on what one dump may answer (a listening table is far smaller)
_TIMEOUT_S = 0.5  # a dump of a listening table takes well under a millisecond


def listening(ports: set[int]) -> list[tuple[int, int, int]] | None:
    """(port, uid, inode) of each IPv4 and IPv6 TCP socket listening on one of `ports`, in this
    process's network namespace; None when netlink is refused (use /proc/net/tcp instead)."""
    found: list[tuple[int, int, int]] = []
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as nl:
            nl.settimeout(_TIMEOUT_S)
            for sequence, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
                found += [s for s in _dump(nl, family, sequence) if s[0] in ports]
    except (OSError, ValueError, struct.error):
        return None
    return found


def _dump(nl: socket.socket, family: int, sequence: int) -> Iterator[tuple[int, int, int]]:
    """One dump of `family`'s listening TCP sockets."""
    body = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, TCPF_LISTEN)
    nl.send(_HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, sequence, 0) + body)
    seen = 0
    while True:
        data = nl.recv(_BUFFER)
        if not data:
            raise ValueError("netlink closed the dump")
        for kind, payload in _messages(data, sequence):
            if kind == NLMSG_DONE:
                return
            if kind == NLMSG_ERROR:
                raise ValueError("netlink refused the dump")
            seen += 1
            if seen > _MAX_MESSAGES:
                raise ValueError("netlink answered more sockets than a listening table holds")
            if kind == SOCK_DIAG_BY_FAMILY and len(payload) >= _MESSAGE_SIZE and payload[1] == TCP_LISTEN:
                yield _socket(payload)


def _messages(data: bytes, sequence: int) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each netlink message of `data` answering `sequence` (others skipped)."""
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind, _, seq, _ = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size or offset + length > len(data):
            raise ValueError("a truncated netlink message")
        if seq == sequence:
            yield kind, data[offset + _HEADER.size : offset + length]
        offset += (length + 3) & ~3  # NLMSG_ALIGN


def _socket(payload: bytes) -> tuple[int, int, int]:
    """(port, uid, inode) of one inet_diag_msg."""
    port = struct.unpack_from(">H", payload, 4)[0]
    uid, inode = _UID_INODE.unpack_from(payload, 64)
    return port, uid, inode
