"""edges.sockdiag: the local identity check's listening sockets from netlink, checked against
/proc/net/tcp and tcp6 on real loopback listeners, and what happens when netlink refuses or
answers nonsense (the /proc read, never a hang)."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from orchestrator.edges import identity, sockdiag


@pytest.fixture
def listeners() -> Iterator[tuple[int, ...]]:
    """Listeners on loopback (their ports): an IPv4 one, and an IPv6 one where the machine has an
    IPv6 loopback (a host with IPv6 off still checks the IPv4 one)."""
    with ExitStack() as stack:
        v4 = stack.enter_context(socket.socket(socket.AF_INET))
        v4.bind(("127.0.0.1", 0))
        v4.listen()
        ports = [v4.getsockname()[1]]
        try:
            v6 = stack.enter_context(socket.socket(socket.AF_INET6))
            v6.bind(("::1", 0))
            v6.listen()
            ports.append(v6.getsockname()[1])
        except OSError:
            pass
        yield tuple(ports)


def test_netlink_finds_what_proc_lists_for_both_families(listeners: tuple[int, ...]) -> None:
    ports = set(listeners)
    found = sockdiag.listening(ports)
    assert found is not None, "netlink refused on this machine: the comparison below is what this test is for"
    assert sorted(found) == sorted((s.port, s.uid, s.inode) for s in identity.listening_in_proc(list(ports)))
    assert {port for port, _, _ in found} == ports


def test_only_listeners_on_the_asked_ports_are_answered(listeners: tuple[int, ...]) -> None:
    v4 = listeners[0]
    client = socket.create_connection(("127.0.0.1", v4))  # a connected socket: its own port is no listener
    try:
        own = client.getsockname()[1]
        assert sockdiag.listening({own}) == []
        assert [port for port, _, _ in sockdiag.listening({v4}) or []] == [v4]
    finally:
        client.close()


def test_the_check_reads_proc_where_netlink_is_refused(
    listeners: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = identity.scan_here(list(listeners))

    def refused(*args: object, **kwargs: object) -> socket.socket:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(sockdiag.socket, "socket", refused)
    assert sockdiag.listening(set(listeners)) is None
    assert identity.scan_here(list(listeners)) == before  # the same sockets and holders, from /proc
    assert {s.port for s in before.sockets} == set(listeners)


class _Scripted:
    """A netlink socket that answers with scripted datagrams."""

    def __init__(self, answers: list[bytes]) -> None:
        self.answers = answers

    def __enter__(self) -> _Scripted:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def settimeout(self, timeout: float) -> None:
        return None

    def send(self, data: bytes) -> int:
        return len(data)

    def recv(self, size: int) -> bytes:
        if not self.answers:
            raise TimeoutError("timed out")  # what a real socket's timeout raises
        return self.answers.pop(0)


def _message(kind: int, payload: bytes, sequence: int = 1) -> bytes:
    return struct.pack("=IHHII", 16 + len(payload), kind, 0, sequence, 0) + payload


def _listener(port: int, uid: int, inode: int) -> bytes:
    return (
        struct.pack("=BBBB", socket.AF_INET, sockdiag.TCP_LISTEN, 0, 0)
        + struct.pack(">H", port)
        + bytes(58)
        + struct.pack("=II", uid, inode)
    )


@pytest.mark.parametrize(
    "answers",
    [
        [_message(sockdiag.NLMSG_ERROR, struct.pack("=i", -1) + bytes(16))],  # refused
        [_message(sockdiag.SOCK_DIAG_BY_FAMILY, _listener(80, 0, 1))[:30]],  # truncated
        [b""],  # closed
        [_message(sockdiag.SOCK_DIAG_BY_FAMILY, _listener(80, 0, 1))],  # then silence: the timeout
        [_message(sockdiag.SOCK_DIAG_BY_FAMILY, _listener(80, 0, 1)) * 800] * 200,  # past any listening table
    ],
    ids=["error", "truncated", "closed", "silent", "endless"],
)
def test_a_refusal_or_nonsense_from_netlink_falls_back_to_proc(
    answers: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sockdiag.socket, "socket", lambda *a, **k: _Scripted(list(answers)))
    assert sockdiag.listening({80}) is None


def test_a_scripted_dump_is_read_for_both_families(monkeypatch: pytest.MonkeyPatch) -> None:
    done = struct.pack("=i", 0)
    answers = [
        _message(sockdiag.SOCK_DIAG_BY_FAMILY, _listener(80, 1000, 7))
        + _message(sockdiag.SOCK_DIAG_BY_FAMILY, _listener(81, 0, 8)),
        _message(sockdiag.NLMSG_DONE, done),
        _message(sockdiag.SOCK_DIAG_BY_FAMILY, _listener(80, 0, 9), sequence=2)
        + _message(sockdiag.NLMSG_DONE, done, sequence=2),
    ]
    monkeypatch.setattr(sockdiag.socket, "socket", lambda *a, **k: _Scripted(answers))
    assert sockdiag.listening({80}) == [(80, 1000, 7), (80, 0, 9)]
