"""The testbed itself: real hosts, isolated from this machine, described by a valid inventory,
and gone without a trace afterwards - also when the test process is SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from testbed.fixture import Testbed, boot_testbed, cgroup2_mount, require_support, shutdown
from testbed.helpers import wait_for

from orchestrator.core.config import read_inventory

pytestmark = pytest.mark.testbed
TESTS = Path(__file__).resolve().parent.parent


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def init_pids(tb: Testbed) -> list[int]:
    return [int((tb.lab / "state" / h.name / "init.pid").read_text()) for h in tb.hosts]


def link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def test_inventory_parses_and_matches_the_hosts(testbed: Testbed, capsys: pytest.CaptureFixture[str]) -> None:
    inv = read_inventory(testbed.inventory)
    with capsys.disabled():
        print(
            f"\n[testbed] boot of 3 hosts: sshd ready {testbed.ssh_ready_s:.2f} s, "
            f"all sim units healthy {testbed.boot_s:.2f} s after launch"
        )
    assert set(inv.testbeds) == {"dsv4-pd", "dsv4-pd-shell", "dsv4-pd-real", "dsv4-pd-several", "dsv4-pd-wide"}
    text = testbed.inventory.read_text()
    for h in testbed.hosts:
        assert f"host: {h.ip}" in text
    assert "dialect: shell" in text and "/etc/sglang/decode-shell.env" in text
    assert "/readiness" in text and str(testbed.key) in text and str(testbed.known_hosts) in text


def test_hosts_are_real_systemd_and_isolated(testbed: Testbed, tmp_path: Path) -> None:
    out = testbed.ssh(
        "router", "cat /proc/1/comm; findmnt -no FSTYPE /; hostname; ls /root; systemctl is-system-running || true"
    ).stdout.split()
    assert out[:3] == ["systemd", "overlay", "router"]
    # writes inside stay inside: the lower layer is this machine's /, but never written
    marker = f"/etc/orch-isolation-{os.getpid()}"
    testbed.ssh("router", f"echo x > {marker}")
    assert not Path(marker).exists()
    testbed.ssh("router", f"rm {marker}")
    # hosts reach each other over the bridge (the router talks to its workers)
    testbed.ssh("router", f"timeout 2 bash -c '</dev/tcp/{testbed.host('decode').ip}/30002'")


def mount_table(lab: Path) -> Counter[str]:
    """This machine's mounts, less the netns pins (nsfs) of testbeds outside `lab`: other pytest
    workers boot and tear down their own testbeds while this test runs, each pinning 3 netns."""
    inside = str(lab) + "/"
    lines = Path("/proc/self/mounts").read_text().splitlines()
    return Counter(line for line in lines if line.split()[2] != "nsfs" or line.split()[1].startswith(inside))


def test_second_testbed_gets_its_own_network_and_leaves_nothing(testbed: Testbed, tmp_path: Path) -> None:
    mounts_before = mount_table(tmp_path / "lab")
    other = boot_testbed(tmp_path / "lab")
    try:
        assert other.bridge != testbed.bridge and other.net != testbed.net
        pids = init_pids(other)
        assert all(alive(p) for p in pids)
        cgroup = cgroup2_mount()
        assert Path(cgroup, f"orch-testbed-{other.bridge}").is_dir()
    finally:
        shutdown(other)
    assert not any(alive(p) for p in pids)
    assert not link_exists(other.bridge)
    assert not Path(cgroup, f"orch-testbed-{other.bridge}").exists()
    assert mount_table(tmp_path / "lab") == mounts_before
    assert link_exists(testbed.bridge)  # the session's testbed is untouched


def test_hosts_are_torn_down_when_the_test_process_is_killed(tmp_path: Path) -> None:
    """SIGKILL skips every finalizer; the reaper started at boot still cleans up."""
    require_support()
    script = textwrap.dedent(f"""
        import json, sys, time
        sys.path.insert(0, {str(TESTS)!r})
        from pathlib import Path
        from testbed.fixture import boot_testbed
        tb = boot_testbed(Path({str(tmp_path / "lab")!r}))
        pids = [int((tb.lab / "state" / h.name / "init.pid").read_text()) for h in tb.hosts]
        print(json.dumps({{"bridge": tb.bridge, "pids": pids}}), flush=True)
        time.sleep(120)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        info = json.loads(child.stdout.readline())  # type: ignore[union-attr]
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert info["pids"]
    took = wait_for(
        lambda: (
            not link_exists(info["bridge"])
            and not any(alive(p) for p in info["pids"])
            and not (tmp_path / "lab" / "state").exists()
        ),
        15,
        "the reaper tore the orphaned hosts down",
    )
    print(f"orphaned testbed removed {took:.2f} s after SIGKILL")
