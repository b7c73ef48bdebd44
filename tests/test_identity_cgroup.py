"""Whose process holds a health port, judged by cgroup where systemd keeps one: units with no
MainPID (Type=forking with GuessMainPID=no, a oneshot with RemainAfterExit=yes) and wrappers that
daemonize the server count as the unit's; a stranger, a docker container and (KillMode=process)
a previous start's leftover do not. Sample /proc/PID/cgroup text and scan output; the real
systemd side is in tests/remote/test_unit_kinds_ssh.py."""

from __future__ import annotations

import base64
import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from fakes import FakeTransport, FakeUnit, Reply, Role, flag, make_bed, make_plan, runner_for

from orchestrator.edges.identity import (
    UNIT_PROPS,
    Holder,
    PortScan,
    Socket,
    UnitId,
    foreign_holder,
    in_cgroup,
    is_units,
    parse_cgroup,
    parse_scan,
    parse_units,
    units_phrase,
)
from orchestrator.edges.services.systemd import SystemdManager

V2 = "0::/system.slice/sglang-decode.service\n"
HYBRID = """\
12:pids:/system.slice/sglang-decode.service
4:memory:/system.slice/sglang-decode.service
1:name=systemd:/system.slice/sglang-decode.service
0::/system.slice/sglang-decode.service
"""
LEGACY = """\
11:cpu,cpuacct:/
3:devices:/system.slice/sglang@decode.service
1:name=systemd:/system.slice/system-sglang.slice/sglang@decode.service
"""
UNIT = "/system.slice/sglang-decode.service"


def test_the_cgroup_paths_systemd_tracks_units_by_are_read_on_v2_hybrid_and_legacy_hosts() -> None:
    assert parse_cgroup(V2) == (UNIT,)
    assert parse_cgroup(HYBRID) == (UNIT,)  # unified and name=systemd agree: once
    assert parse_cgroup(LEGACY) == ("/system.slice/system-sglang.slice/sglang@decode.service",)
    assert parse_cgroup("0::/\n1:name=systemd:/user.slice/user-1000.slice/session-3.scope\n") == (
        "/",
        "/user.slice/user-1000.slice/session-3.scope",
    )
    assert parse_cgroup("garbage\n3:devices:/x\n") == ()


def test_below_the_units_cgroup_counts_by_whole_path_components() -> None:
    assert in_cgroup([UNIT], UNIT) and in_cgroup([UNIT + "/payload"], UNIT + "/")
    assert not in_cgroup(["/system.slice/sglang-decode.service2"], UNIT)
    assert not in_cgroup(["/system.slice"], UNIT)
    assert not in_cgroup([UNIT], "/") and not in_cgroup([UNIT], "")  # no cgroup: nothing is inside


def test_systemctl_show_gives_the_cgroup_of_an_active_unit_only_and_running_without_a_main_pid() -> None:
    text = (
        f"MainPID=0\nInvocationID=aa\nActiveState=active\nControlGroup={UNIT}\nKillMode=control-group\n\n"
        "MainPID=0\nInvocationID=\nActiveState=inactive\nControlGroup=/system.slice/b.service\nKillMode=mixed\n\n"
        "MainPID=7\nInvocationID=cc\nActiveState=active\nControlGroup=/system.slice/c.service\nKillMode=process\n"
    )
    ids = parse_units(text, ["a", "b", "c"])
    assert ids["a"] == UnitId("a", None, "aa", UNIT, "control-group")
    assert ids["a"].running and ids["a"].own_cgroup == UNIT
    assert not ids["b"].running and ids["b"].cgroup == ""  # inactive: no process, no cgroup
    assert ids["c"].own_cgroup == ""  # KillMode=process: its cgroup may hold a previous start's server
    assert units_phrase({"a": ids["a"]}) == f"unit a (no main pid, cgroup {UNIT})"
    assert units_phrase({"c": ids["c"]}) == "unit c (pid 7, cgroup /system.slice/c.service)"


def holder(pid: int, chain: tuple[int, ...], cgroup: str, inode: int = 11) -> Holder:
    return Holder(pid, inode, 0, "python3 -m sglang.launch_server", chain, (cgroup,))


def test_a_server_in_the_units_cgroup_is_the_units_whatever_its_parent() -> None:
    forked = holder(900, (900, 1), UNIT)  # daemonized: reparented to PID 1, no MainPID
    no_main = {"u": UnitId("u", None, "aa", UNIT)}
    wrapper = {"u": UnitId("u", 500, "aa", UNIT)}  # MainPID: a shell that stays alive
    scan = PortScan((Socket(30002, 0, 11),), (forked,), {0: "root"})
    assert is_units(forked, no_main) and foreign_holder(scan, 30002, no_main) is None
    assert foreign_holder(scan, 30002, wrapper) is None
    child = holder(901, (901, 500, 1), UNIT + "/payload")
    assert is_units(child, wrapper)
    moved = holder(902, (902, 500, 1), "/user.slice/user-0.slice/session-4.scope")  # `su -` in ExecStart
    assert is_units(moved, wrapper)  # a descendant of MainPID is the unit's, wherever PAM moved it


def test_a_stranger_in_another_cgroup_is_named_with_its_cgroup() -> None:
    tmux = holder(4242, (4242, 4000, 1), "/user.slice/user-1000.slice/session-2.scope")
    ids = {"u": UnitId("u", None, "aa", UNIT)}
    scan = PortScan((Socket(30002, 1000, 11),), (tmux,), {0: "root"})
    said = foreign_holder(scan, 30002, ids)
    assert said == (
        "pid 4242 (python3 -m sglang.launch_server, user root, cgroup /user.slice/user-1000.slice/session-2.scope)"
    )
    assert (
        foreign_holder(scan, 30002, {"u": UnitId("u", None)}) == "pid 4242 (python3 -m sglang.launch_server, user root)"
    )


def test_a_docker_container_is_refused_saying_why_and_what_to_do() -> None:
    container = holder(7000, (7000, 6990, 1), "/system.slice/docker-3f2a9c1e.scope")
    ids = {"u": UnitId("u", 500, "aa", UNIT)}  # MainPID: the `docker run` client
    scan = PortScan((Socket(30002, 0, 11),), (container,), {0: "root"})
    said = foreign_holder(scan, 30002, ids) or ""
    assert said.startswith("pid 7000 (python3 -m sglang.launch_server, user root, cgroup /system.slice/docker-3f2a9c1e")
    assert f"a container outside the unit's cgroup {UNIT}" in said
    assert "podman run --cgroups=split or a Quadlet unit" in said and "README" in said


def test_with_killmode_process_only_the_main_pid_and_its_descendants_count() -> None:
    """A restart with KillMode=process leaves the previous start's server in the cgroup; holding
    the port, it must not pass for the new start's."""
    leftover = holder(800, (800, 1), UNIT)
    ids = {"u": UnitId("u", 950, "bb", UNIT, "process")}
    scan = PortScan((Socket(30002, 0, 11),), (leftover,), {0: "root"})
    said = foreign_holder(scan, 30002, ids) or ""
    assert said.startswith(f"pid 800 (python3 -m sglang.launch_server, user root, cgroup {UNIT})")
    assert "KillMode=process leaves old processes in its cgroup" in said
    assert foreign_holder(PortScan(scan.sockets, (holder(951, (951, 950, 1), UNIT),), {}), 30002, ids) is None


def b64(argv: Sequence[str]) -> str:
    return base64.b64encode(b"\0".join(a.encode() for a in argv) + b"\0").decode()


SCAN = f"""\
units
MainPID=0
InvocationID=0f1e
ActiveState=active
ControlGroup={UNIT}
KillMode=control-group
end
sock|7532|0|770001
sock|7530|1000|770002
hold|1240|770001|0|{b64(["python3", "-m", "sglang.launch_server"])}| 1240 1
cg|1240|1:name=systemd:{UNIT}
cg|1240|0::{UNIT}
hold|4242|770002|1000|{b64(["python3", "-m", "http.server"])}| 4242 4000 1
cg|4242|0::/system.slice/orch-sshd.service
user|1000|alice
"""


def test_the_scan_gives_each_holder_its_cgroup() -> None:
    scan, ids = parse_scan(SCAN, ["sglang-decode.service"])
    assert [h.cgroups for h in scan.holders] == [(UNIT,), ("/system.slice/orch-sshd.service",)]
    assert ids["sglang-decode.service"].own_cgroup == UNIT
    assert foreign_holder(scan, 30002, ids) is None  # forking, no MainPID: its server is in its cgroup
    assert "cgroup /system.slice/orch-sshd.service" in (foreign_holder(scan, 30000, ids) or "")


def test_one_round_trip_reads_the_units_cgroups_and_the_holders_cgroups() -> None:
    t = FakeTransport("decode")
    t.script(("sh", "-c"), Reply(0, SCAN))
    scan, ids = SystemdManager(t, "decode").port_scan([30002, 30000], ["sglang-decode.service"])
    (command,) = t.commands()
    assert f"systemctl show -p {UNIT_PROPS} --" in command
    assert re.search(r'case \$l in 0::\*\|\*:name=systemd:\*\) echo "cg\|\$p\|\$l"', command)
    assert "ControlGroup" in UNIT_PROPS and "KillMode" in UNIT_PROPS
    assert foreign_holder(scan, 30002, ids) is None and ids["sglang-decode.service"].running


def test_trials_on_a_unit_without_a_main_pid_are_data_and_its_restart_mid_repro_voids_one(tmp_path: Path) -> None:
    """A forking unit systemd knows no MainPID of: every trial used to be void ("not running");
    its trials count, and a new invocation during the repro (same: no pid) still voids one."""
    bed = make_bed({"prefill": Role("FLAG=0\n", [FakeUnit("prefill-server", no_main_pid=True)])})
    plan = make_plan(bed, {"f": flag("prefill", "FLAG")})
    result = runner_for(bed, plan, tmp_path / "run").execute()
    assert (result.completed, result.failed) == (2, 0), [r.failure for r in result.records]
    assert bed.file("prefill") == bed.originals["prefill"]
    manager = bed.managers["prefill"]
    ids_of = manager.unit_ids

    def restarted_meanwhile(units: Sequence[str]) -> dict[str, UnitId]:
        return {u: dataclasses.replace(i, invocation_id=i.invocation_id + "x") for u, i in ids_of(units).items()}

    manager.port_scan = lambda ports, units: (PortScan(), restarted_meanwhile(units))  # type: ignore[method-assign]
    again = runner_for(bed, plan, tmp_path / "again", infra_attempts=1).execute()
    assert again.failed == 2 and all(r.failure is not None for r in again.records)
    message = again.records[0].failure.message if again.records[0].failure else ""
    assert re.search(r"unit prefill-server restarted during the repro \(invocation \d+ -> \d+x\)", message), message
