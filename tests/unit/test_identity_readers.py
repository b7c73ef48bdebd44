"""The local manager's in-process reading of who listens (edges.identity.scan_here): the LISTEN
rows of /proc/net/tcp it keeps are the ones the scan script's awk keeps (an established
connection on the unit's port is no listener), and a holder is named with its own uid and user.

Found by mutation testing (bench/mutants.py): dropping the stop at the first non-LISTEN row, or
never reading the holder's uid (every stranger then "unknown user"), left every test green.
"""

from __future__ import annotations

import os
import pwd
import socket
import threading
from pathlib import Path

from helpers.procnet import TCP

from orchestrator.edges import identity
from orchestrator.edges.identity import Socket, port_hex, scan_here


def test_only_the_listening_rows_on_the_ports_asked_are_read_as_the_script_reads_them(tmp_path: Path) -> None:
    """The same sample and answers as the awk filter's test (tests/test_identity_parse.py)."""
    path = tmp_path / "tcp"
    path.write_text(TCP)

    def read(*ports: int) -> list[Socket]:
        return identity._listening(str(path), {port_hex(p) for p in ports})

    assert read(30000, 30001) == [Socket(30000, 1000, 880467), Socket(30001, 0, 880468)]
    assert read(50000) == []  # a client's port: no listener
    assert read(30003) == []  # reading stops at the first row that is not LISTEN


def test_the_holder_of_a_port_is_named_with_its_own_uid_and_user() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        scan = scan_here([s.getsockname()[1]], [os.getpid()])
    (holder,) = scan.holders
    assert holder.uid == os.getuid()
    assert scan.user(holder.uid) == f"user {pwd.getpwuid(os.getuid()).pw_name}"


def test_lines_the_scan_script_did_not_write_are_ignored() -> None:
    """A shell start-up file that echoes (a banner, a warning) or a cut line must not stop the
    scan or invent a user: the rows around them are read as without them."""
    text = (
        "units\nMainPID=7\nActiveState=active\nend\nWelcome to node-3\nuser|nobody\nsock|7530|0|880467\nuser|0|root\n"
    )
    scan, ids = identity.parse_scan(text, ["a.service"])
    assert scan.sockets == (Socket(30000, 0, 880467),)
    assert scan.users == {0: "root"}
    assert ids["a.service"].main_pid == 7


def test_a_holder_whose_owner_could_not_be_read_is_an_unknown_user(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A holder that exited while it was read (its /proc status gone) has no uid: the scan still
    answers, with the socket's owner named and the holder said to be an "unknown user", never
    "user uid None" or a crash looking up a user of uid None (found by bench/mutants.py)."""
    monkeypatch.setattr(identity, "_holder", lambda pid, inode: identity.Holder(pid, inode, None, "", ()))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        scan = scan_here([s.getsockname()[1]], [os.getpid()])
    (holder,) = scan.holders
    assert holder.uid is None and scan.user(holder.uid) == "unknown user"
    assert scan.users == {os.getuid(): pwd.getpwuid(os.getuid()).pw_name}  # the socket's owner, named


def test_a_socket_a_resumed_read_lists_twice_is_one_socket(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Neither /proc/net/tcp nor a netlink dump is one atomic read: a listener opened while the
    kernel fills the next buffer makes it list a socket twice. Every way the scan reads listeners
    reports each socket once (a flake of tests/unit/test_sockdiag.py, reproduced and traced here)."""
    twice = [Socket(30000, 0, 7), Socket(30001, 0, 8), Socket(30000, 0, 7)]
    monkeypatch.setattr(identity.sockdiag, "listening", lambda ports: [(s.port, s.uid, s.inode) for s in twice])
    assert identity.listening_here([30000, 30001]) == twice[:2]
    monkeypatch.setattr(identity.sockdiag, "listening", lambda ports: None)
    monkeypatch.setattr(identity, "_listening", lambda path, want: twice if path.endswith("tcp6") else [])
    assert identity.listening_here([30000, 30001]) == twice[:2]
    scan, _ = identity.parse_scan("sock|7530|0|7\nsock|7531|0|8\nsock|7530|0|7\n")
    assert scan.sockets == tuple(twice[:2])


def test_proc_lists_each_listener_once_while_others_open_and_close() -> None:
    """The kernel's own duplicate: 400 reads of this process's IPv6 listener while a thread opens
    and closes others (before `once`, 8 to 24 of 500 such reads listed it twice here)."""
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            with socket.socket(socket.AF_INET6) as other:
                other.bind(("::1", 0))
                other.listen()

    with socket.socket(socket.AF_INET6) as mine:
        mine.bind(("::1", 0))  # tcp6: the file whose last, empty read finds its place again
        mine.listen()
        port = mine.getsockname()[1]
        churner = threading.Thread(target=churn)
        churner.start()
        try:
            reads = [identity.listening_in_proc([port]) for _ in range(400)]
        finally:
            stop.set()
            churner.join()
    assert all(read == [Socket(port, os.getuid(), read[0].inode)] for read in reads)
