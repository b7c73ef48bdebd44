"""A hunt is a run like any other: `orch hunt -t tb1,tb2` spreads its configurations over two
private simulated testbeds, holds both testbeds' locks, survives a real kill -9 of its controller
(hosts left changed, locks left behind), and `orch resume` finishes it: the culprits named, no
trial lost or run twice, every env file byte-identical, no server left, no lock left.

Four suspect flags on decode, the truth set in the simulator's flag model (sim/culprits.py):
the failure needs ALPHA and BETA on together (half the sessions), no background, no
trial-to-trial variation, so the hunt needs few trials and the test stays short.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.inproc import orch_in
from helpers.netutil import port_open
from helpers.sim_testbeds import env_bytes, kill_servers_on, write_inventory
from helpers.smallhunt import DECODE_ENV, MATRIX

from orchestrator.core.records import TrialRecord
from orchestrator.store.journal import read_journal

pytestmark = pytest.mark.sim

ENV = {
    "prefill": "SIM_WARMUP_S=0.05\n",
    "decode": DECODE_ENV,
    "router": "SIM_WARMUP_S=0.05\n",
}
KILL_AFTER = 4  # finished trials before the controller is killed


def orch(*args: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.cli.main", *args]


def trials_of(run_dir: Path) -> list[TrialRecord]:
    journal = run_dir / "journal.jsonl"
    return [r for r in read_journal(journal).records if isinstance(r, TrialRecord)] if journal.exists() else []


def test_a_hunt_across_two_testbeds_survives_kill_9_and_resume_names_the_culprits(tmp_path: Path) -> None:
    inventory, ports = write_inventory(tmp_path, ["tb1", "tb2"], ENV)
    (tmp_path / "m.yaml").write_text(MATRIX)
    before = env_bytes(tmp_path)
    run_dir = tmp_path / "r" / "h"
    argv = orch("hunt", "m.yaml", "-i", str(inventory), "-t", "tb1,tb2", "--out", "r", "--run-id", "h", "--seed", "2")
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            deadline = time.monotonic() + 120
            while len(trials_of(run_dir)) < KILL_AFTER:
                assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < deadline, "the hunt did not finish 4 trials in 120 s"
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()
        killed_with = trials_of(run_dir)
        # the killed hunt held both testbeds: their locks are still there, their hosts still changed
        held = {p.name for p in tmp_path.glob("*.orch-lock")}
        assert held >= {"tb1-decode.env.orch-lock", "tb2-decode.env.orch-lock"}, held
        assert env_bytes(tmp_path) != before or any(port_open(p) for p in ports)

        resumed = orch_in(["resume", str(run_dir)], cwd=tmp_path)  # nothing signals it: in this process
        said = resumed.stdout + resumed.stderr
        assert resumed.returncode == 0, said
    finally:
        kill_servers_on(ports)  # a no-op when orch stopped them, as it must
    assert "resuming h:" in said and "hunt across 2 testbeds" in said, said
    culprit = re.search(r"culprit: (.+) \(posterior (?:> )?([0-9.]+)\)", said)  # "> 0.999": rounds to 1
    assert culprit and culprit[1] == "alpha AND beta" and float(culprit[2]) >= 0.95, said

    trials = trials_of(run_dir)
    finished = [t for t in trials if t.status in ("completed", "failed")]
    indices = [t.trial for t in finished]
    assert len(indices) == len(set(indices)), "a trial ran twice"
    assert {t.trial for t in killed_with if t.status in ("completed", "failed")} <= set(indices), "a trial was lost"
    assert {t.testbed for t in finished} == {"tb1", "tb2"}  # the configurations were spread over both
    assert (run_dir / "hunt.html").exists()
    assert env_bytes(tmp_path) == before
    assert not any(port_open(p) for p in ports)
    assert not list(tmp_path.glob("*.orch-*"))  # locks released, no backup left on the hosts
