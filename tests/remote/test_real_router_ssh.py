"""A sweep whose router role is the real `sglang-router` under systemd, on the real testbed.

The router checks its workers every 60 s (its default), so when decode restarts between trials
it never notices: it calls the dead decode healthy during the restart and keeps its pooled
connections to the old process. orch waits on decode's own /health, the router's /readiness,
and one generate through the router; every trial's repro then goes through without one error.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers.ssh_sweep import MATRIX, snapshot, trials_of
from testbed.fixture import Testbed

from orchestrator.cli.main import main

pytestmark = pytest.mark.testbed

FILES = {
    "prefill": "/etc/sglang/prefill.env",
    "decode": "/etc/sglang/decode.env",
    "router": "/etc/sglang/router-real.env",
}


def test_sweep_behind_the_real_router_under_systemd(testbed: Testbed, tmp_path: Path, capsys) -> None:
    pid = testbed.ssh("router", "systemctl show -p MainPID --value sglang-router-real").stdout.strip()
    exec_start = testbed.ssh("router", "systemctl show -p ExecStart --value sglang-router-real").stdout
    assert "-m sglang_router.launch_router --pd-disaggregation" in exec_start, exec_start
    cmdline = testbed.ssh("router", f"cat /proc/{pid}/cmdline").stdout
    assert cmdline.startswith("sglang::router"), cmdline  # the real router retitles its process
    before = snapshot(testbed, FILES)
    (tmp_path / "m.yaml").write_text(MATRIX)
    t0 = time.monotonic()
    argv = ["run", str(tmp_path / "m.yaml"), "-i", str(testbed.inventory), "-t", "dsv4-pd-real"]
    code = main([*argv, "--out", str(tmp_path / "r"), "--run-id", "real", "--retries", "0"])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    trials = trials_of(tmp_path / "r" / "real")
    assert [t.status for t in trials] == ["completed"] * 4, [t.failure for t in trials]
    assert {u for t in trials for u in t.restarted} == {"decode:sglang-dsv4-decode"}  # the router stays up
    for t in trials:
        assert t.repro is not None and "ERRORS sessions: 0/8" in t.repro.stdout_tail, t.repro
        assert set(t.health_wait_s) == {"prefill", "decode", "router"}
    with capsys.disabled():
        waits = ", ".join(f"{t.health_wait_s['router']:.2f}" for t in trials)
        took = time.monotonic() - t0
        print(f"\nreal router under systemd: {len(trials)} trials in {took:.1f} s; router waits {waits} s")
    assert snapshot(testbed, FILES) == before  # env files restored byte for byte
    assert testbed.ssh("router", "systemctl show -p MainPID --value sglang-router-real").stdout.strip() == pid
