"""edges.identity without a host: the LISTEN filter (awk) on sample /proc/net/tcp{,6} text, the
scan script's output parsed, `systemctl show` blocks, and who counts as the unit's own process."""

from __future__ import annotations

import base64
import dataclasses
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from helpers.procnet import TCP, TCP6

from orchestrator.edges.identity import (
    AWK_LISTEN,
    MAX_HOLDERS,
    Holder,
    PortScan,
    Socket,
    UnitId,
    foreign_holder,
    parse_scan,
    parse_units,
    port_hex,
    scan_argv,
    scan_here,
    units_phrase,
)


def listeners(tmp_path: Path, ports: list[int]) -> list[str]:
    if shutil.which("awk") is None:
        pytest.skip("no awk")
    (tmp_path / "tcp").write_text(TCP)
    (tmp_path / "tcp6").write_text(TCP6)
    want = " " + " ".join(port_hex(p) for p in ports) + " "
    lines = []
    for name in ("tcp", "tcp6"):  # one awk per file, as the scan script runs it
        argv = ["awk", "-v", f"want={want}", AWK_LISTEN, str(tmp_path / name)]
        lines += subprocess.run(argv, capture_output=True, text=True, check=True, timeout=10).stdout.splitlines()
    return lines


@pytest.mark.process
def test_only_listen_sockets_on_the_ports_asked_are_reported_ipv4_and_ipv6(tmp_path: Path) -> None:
    # 30000 = 0x7530 listens (and has an established connection, not reported); 30002 on ::1
    assert listeners(tmp_path, [30000, 30002]) == ["sock|7530|1000|880467", "sock|7532|998|770001"]
    assert listeners(tmp_path, [30001]) == ["sock|7531|0|880468"]
    assert listeners(tmp_path, [50000, 1]) == []  # a client port and an unused one: nothing listens
    # awk stops at the first row that is not LISTEN (the kernel lists listeners first): a
    # made-up LISTEN row after it is never read, so a busy host's TIME_WAIT rows are not either
    assert listeners(tmp_path, [30003]) == []


def test_port_hex_matches_proc_net_tcp() -> None:
    assert (port_hex(30000), port_hex(80), port_hex(65535)) == ("7530", "0050", "FFFF")
    argv = scan_argv([30000, 30002], ["a.service"])
    assert argv[:2] == ["sh", "-c"] and argv[3:] == ["orch-identity", "2", "7530", "7532", "a.service"]


def b64(argv: list[str]) -> str:
    return base64.b64encode(b"\0".join(a.encode() for a in argv) + b"\0").decode()


SCAN = f"""\
units
MainPID=1234
InvocationID=0f1e2d
ActiveState=active

MainPID=0
InvocationID=
ActiveState=inactive
end
sock|7530|1000|880467
sock|7532|0|770001
hold|4242|880467|1000|{b64(["python3", "-m", "http.server", "30000"])}| 4242 4000 1
hold|1240|770001|0|{b64(["python3", "-m", "sglang.launch_server"])}| 1240 1234 1
user|1000|alice
user|0|root
"""


def test_the_scan_output_is_parsed_into_sockets_holders_users_and_unit_ids() -> None:
    scan, ids = parse_scan(SCAN, ["prefill.service", "decode.service"])
    assert scan.sockets == (Socket(30000, 1000, 880467), Socket(30002, 0, 770001))
    assert scan.holders[0] == Holder(4242, 880467, 1000, "python3 -m http.server 30000", (4242, 4000, 1))
    assert scan.holders[1].chain == (1240, 1234, 1)
    assert scan.users == {1000: "alice", 0: "root"}
    assert ids == {
        "prefill.service": UnitId("prefill.service", 1234, "0f1e2d"),
        "decode.service": UnitId("decode.service", None, ""),
    }


def test_a_stranger_is_named_with_pid_command_line_and_user() -> None:
    scan, ids = parse_scan(SCAN, ["prefill.service", "decode.service"])
    assert foreign_holder(scan, 30000, ids) == "pid 4242 (python3 -m http.server 30000, user alice)"
    # a descendant of the unit's MainPID (a worker under a wrapper) is the unit's own
    assert foreign_holder(scan, 30002, ids) is None
    # nothing listens on the host: the URL is served elsewhere, nothing to judge
    assert foreign_holder(scan, 30001, ids) is None
    # a unit that is not running owns nothing: any listener is a stranger
    assert (
        foreign_holder(scan, 30002, {"u": UnitId("u", None)}) == "pid 1240 (python3 -m sglang.launch_server, user root)"
    )


def test_a_stranger_on_another_address_of_the_units_port_is_named() -> None:
    """The unit listens on 127.0.0.1:30000, a stranger on 127.0.0.2:30000 (or the node's address,
    or IPv6 only) and the health URL names the stranger's address: one socket of the port being
    the unit's does not make the other one the unit's."""
    unit = Holder(1240, 11, 0, "python3 -m sglang.launch_server", (1240, 1234, 1))
    stranger = Holder(4242, 22, 1000, "python3 -m http.server 30000", (4242, 4000, 1))
    ids = {"u": UnitId("u", 1234)}
    both = PortScan((Socket(30000, 0, 11), Socket(30000, 1000, 22)), (unit, stranger), {1000: "alice"})
    assert foreign_holder(both, 30000, ids) == "pid 4242 (python3 -m http.server 30000, user alice)"
    dual = PortScan((Socket(30000, 0, 11), Socket(30000, 0, 12)), (unit, dataclasses.replace(unit, inode=12)), {})
    assert foreign_holder(dual, 30000, ids) is None  # IPv4 and IPv6 sockets, both the unit's
    unseen = PortScan((Socket(30000, 0, 11), Socket(30000, 1001, 22)), (unit,), {})
    assert "a process orch cannot see (user uid 1001" in (foreign_holder(unseen, 30000, ids) or "")
    workers = tuple(dataclasses.replace(unit, pid=2000 + i, chain=(2000 + i, 1240, 1234)) for i in range(MAX_HOLDERS))
    cut = PortScan((Socket(30000, 0, 11), Socket(30000, 0, 12)), workers, {})  # socket 12's holders cut off
    assert foreign_holder(cut, 30000, ids) is None


def test_a_listener_whose_process_cannot_be_seen_is_foreign_and_names_its_user() -> None:
    scan = PortScan((Socket(30000, 1001, 5),), (), {})
    problem = foreign_holder(scan, 30000, {"u": UnitId("u", 77)})
    assert problem is not None
    assert "uid 1001" in problem and "sudo: true" in problem


def test_unit_ids_from_systemctl_show_and_their_phrase() -> None:
    ids = parse_units(
        "MainPID=9\nInvocationID=ab\nActiveState=active\n\nMainPID=5\nActiveState=deactivating\n", ["a", "b"]
    )
    assert ids == {"a": UnitId("a", 9, "ab"), "b": UnitId("b", None, "")}
    assert units_phrase({"a": ids["a"]}) == "unit a (pid 9)"
    assert units_phrase(ids) == "units a (pid 9), b (not running)"


def test_scan_here_finds_this_process_on_its_own_listening_sockets() -> None:
    """The local manager's in-process scan (no fork), on loopback sockets of the test itself."""
    with socket.socket() as s4, socket.socket(socket.AF_INET6) as s6:
        s4.bind(("127.0.0.1", 0))
        s4.listen()
        try:
            s6.bind(("::1", 0))
            s6.listen()
        except OSError:
            pytest.skip("no IPv6 loopback")
        ports = [s4.getsockname()[1], s6.getsockname()[1]]
        me = {"u": UnitId("u", os.getpid())}
        for first in ([os.getpid()], []):  # the units' own pids first, or the whole of /proc
            scan = scan_here(ports, first)
            assert {s.port for s in scan.sockets} == set(ports)
            assert {(h.pid, h.chain[0]) for h in scan.holders} == {(os.getpid(), os.getpid())}
            assert len(scan.holders) == 2  # one per socket, both held by this process
            assert all(foreign_holder(scan, port, me) is None for port in ports)
            stranger = foreign_holder(scan, ports[1], {"u": UnitId("u", 2**22 + 1)})  # not an ancestor
            assert stranger is not None and stranger.startswith(f"pid {os.getpid()} (")
    assert scan_here(ports, [os.getpid()]) == PortScan()  # closed: nothing listens


def test_a_server_reporting_another_pid_than_the_ports_holder_is_named() -> None:
    """/get_server_info's pid must be the port's holder (or the unit's main pid): a server that
    says it is someone else answered through something that is not the unit's process."""
    from orchestrator.edges.identity import Holder, PortScan, Socket, UnitId, reported_pid_mismatch

    scan = PortScan(
        sockets=(Socket(port=30000, inode=77, uid=0),),
        holders=(Holder(pid=1234, inode=77, uid=0, cmdline="python -m sim", chain=(1234, 1000, 1)),),
        users={0: "root"},
    )
    ids = {"sim-prefill": UnitId(unit="sim-prefill", main_pid=1000, invocation_id="a")}
    assert reported_pid_mismatch(scan, 30000, ids, 1234) is None  # the holder itself
    assert reported_pid_mismatch(scan, 30000, ids, 1000) is None  # the unit's main pid
    assert reported_pid_mismatch(scan, 30000, ids, None) is None  # a server that says nothing
    assert reported_pid_mismatch(scan, 30000, ids, True) is None  # not a pid
    assert reported_pid_mismatch(scan, 30001, ids, 999) is None  # nothing listens there: not judged
    said = reported_pid_mismatch(scan, 30000, ids, 4242)
    assert said == "the server on port 30000 reports pid 4242, but the port is held by pid 1234"
