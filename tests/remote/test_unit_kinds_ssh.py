"""Units that are not a plain Type=simple ExecStart, on real systemd 252 over SSH: a Type=forking
unit systemd knows no MainPID of (GuessMainPID=no) and a wrapper script that daemonizes the
server (reparented to PID 1, no descendant of MainPID) both serve from their own cgroup, which is
what orch checks; a stranger started from an SSH session on the same host is still refused, and
a sweep on the unit without MainPID gives data and leaves its env file as found."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pytest
import yaml
from helpers.ssh_sweep import attempts_of
from testbed.fixture import Testbed
from testbed.helpers import transport, wait_healthy

from orchestrator.cli.main import main
from orchestrator.edges.identity import foreign_holder
from orchestrator.edges.services.systemd import SystemdManager

pytestmark = pytest.mark.testbed

FORKING, DAEMON = "orch-kind-forking", "orch-kind-daemon"
PORTS = {FORKING: 30061, DAEMON: 30062}
STRANGER_PORT = 30063
ENV = "SIM_WARMUP_S=0\nSIM_SEED=7\nSGLANG_DSV4_BF16_INDEX_K=1\nSGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1\n"
MATRIX = """\
name: unit-kinds
factors:
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
order: sequential
health_timeouts: {decode: 30}
repro:
  command: "echo 'CORRUPTION sessions: 0/8'"
  timeout: 60
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""


def install(tb: Testbed) -> None:
    """Both units on the decode host: the server started detached by a script (setsid, then the
    script exits, or stays to watch it), its flags from /etc/sglang/kinds/UNIT.env."""
    server = f"{shlex.quote(tb.python)} -m orchestrator.sim.server --role decode --host 0.0.0.0 --port"
    detach = f"(setsid {server} $1 </dev/null >/dev/null 2>&1 & echo $! > /run/$2.pid)"
    common = (
        "[Unit]\nDefaultDependencies=no\n[Service]\n"
        f"Environment=PYTHONPATH={tb.checkout} PYTHONPYCACHEPREFIX=/var/tmp/pycache\n"
    )
    forking = (
        f"{common}Type=forking\nGuessMainPID=no\nEnvironmentFile=/etc/sglang/kinds/{FORKING}.env\n"
        f"ExecStart=/usr/local/bin/orch-kind-detach {PORTS[FORKING]} {FORKING}\n"
    )
    daemon = (
        f"{common}Type=simple\nEnvironmentFile=/etc/sglang/kinds/{DAEMON}.env\n"
        f"ExecStart=/usr/local/bin/orch-kind-watch {PORTS[DAEMON]} {DAEMON}\n"
    )
    tb.ssh(
        "decode",
        "mkdir -p /etc/sglang/kinds && "
        + "".join(f"printf %s {shlex.quote(ENV)} > /etc/sglang/kinds/{u}.env && " for u in PORTS)
        + f"printf '%s\\n' '#!/bin/sh' {shlex.quote(detach)} > /usr/local/bin/orch-kind-detach && "
        + f"printf '%s\\n' '#!/bin/sh' {shlex.quote(detach)} "
        + "'while kill -0 $(cat /run/$2.pid) 2>/dev/null; do sleep 0.2; done' > /usr/local/bin/orch-kind-watch && "
        + "chmod +x /usr/local/bin/orch-kind-detach /usr/local/bin/orch-kind-watch && "
        + f"printf %s {shlex.quote(forking)} > /etc/systemd/system/{FORKING}.service && "
        + f"printf %s {shlex.quote(daemon)} > /etc/systemd/system/{DAEMON}.service && "
        + f"systemctl daemon-reload && systemctl start {FORKING} {DAEMON}",
    )


def uninstall(tb: Testbed) -> None:
    tb.ssh(
        "decode",
        f"systemctl stop {FORKING} {DAEMON}; rm -rf /etc/sglang/kinds /usr/local/bin/orch-kind-* "
        f"/etc/systemd/system/orch-kind-*; systemctl daemon-reload",
        check=False,
    )


def inventory(tb: Testbed, path: Path) -> Path:
    """dsv4-pd's decode host alone, serving from the forking unit."""
    data = yaml.safe_load(tb.inventory.read_text())
    host = data["testbeds"]["dsv4-pd"]["hosts"]["decode"]
    url = f"http://{tb.host('decode').ip}:{PORTS[FORKING]}"
    host.update(env_file=f"/etc/sglang/kinds/{FORKING}.env", units=[FORKING], url=url, health=url + "/health")
    path.write_text(yaml.safe_dump({"testbeds": {"forking": {"hosts": {"decode": host}}}}))
    return path


def test_units_without_main_pid_or_with_a_daemonized_server_serve_from_their_cgroup(
    testbed: Testbed, tmp_path: Path, capsys
) -> None:
    t0 = time.monotonic()
    ip = testbed.host("decode").ip
    install(testbed)
    stranger = testbed.ssh(  # from an SSH session: the sshd service's cgroup, not a unit's
        "decode",
        f"setsid {shlex.quote(testbed.python)} -c 'import socket, time; s = socket.socket(); "
        f's.bind(("0.0.0.0", {STRANGER_PORT})); s.listen(); time.sleep(60)\' >/dev/null 2>&1 </dev/null & echo $!',
    )
    t = transport(testbed, "decode")
    try:
        for port in PORTS.values():
            wait_healthy(f"http://{ip}:{port}/health")
        shown = testbed.ssh("decode", f"systemctl show -p MainPID --value {FORKING} {DAEMON}").stdout.split()
        assert shown[0] == "0" and int(shown[1]) > 0, shown  # no MainPID; the watching script's pid
        manager = SystemdManager(t, "decode")
        scan, ids = manager.port_scan([*PORTS.values(), STRANGER_PORT], list(PORTS))
        for unit, port in PORTS.items():
            assert foreign_holder(scan, port, {unit: ids[unit]}) is None, (unit, foreign_holder(scan, port, ids))
        assert ids[FORKING].main_pid is None and ids[FORKING].running
        assert ids[FORKING].cgroup == f"/system.slice/{FORKING}.service"
        said = foreign_holder(scan, STRANGER_PORT, ids) or ""
        assert said.startswith(f"pid {stranger.stdout.strip()} (") and "cgroup /system.slice/orch-sshd" in said, said
        assert (manager.environ(FORKING) or {}).get("SGLANG_OPT_USE_MULTI_STREAM_OVERLAP") == "1"
        env_before = testbed.ssh("decode", f"cat /etc/sglang/kinds/{FORKING}.env").stdout
        (tmp_path / "m.yaml").write_text(MATRIX)
        argv = ["run", str(tmp_path / "m.yaml"), "-i", str(inventory(testbed, tmp_path / "inv.yaml"))]
        code = main([*argv, "-t", "forking", "--out", str(tmp_path / "r"), "--run-id", "forking"])
        assert code == 0, capsys.readouterr().err
        trials = attempts_of(tmp_path / "r" / "forking")
        assert [(r.status, r.failure) for r in trials] == [("completed", None)] * 2
        assert testbed.ssh("decode", f"cat /etc/sglang/kinds/{FORKING}.env").stdout == env_before
    finally:
        t.close()
        testbed.ssh("decode", f"kill {stranger.stdout.strip()}", check=False)
        uninstall(testbed)
    assert time.monotonic() - t0 < 15
