"""sshd stopped for 10 s in the middle of a sweep over SSH (issue 4's fault on real hosts).

orch's persistent connection to decode is cut (every sshd process killed) and sshd comes back
after 10 s (a transient timer inside the host). The trial that hits the outage fails as an
infrastructure failure, is retried with backoff until sshd is back, and the sweep completes:
every planned trial journaled exactly once, env files byte-identical afterwards.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.ssh_sweep import ENV_FILES, MATRIX, no_leftovers, snapshot
from testbed.fixture import Testbed

from orchestrator.core.records import TrialRecord
from orchestrator.store.journal import read_journal

pytestmark = pytest.mark.testbed


def trials_of(run_dir: Path) -> list[TrialRecord]:
    if not (run_dir / "journal.jsonl").exists():
        return []
    """Each trial's final record (its failed attempts before a retry are journaled with `retried`)."""
    records = read_journal(run_dir / "journal.jsonl").records
    return [r for r in records if isinstance(r, TrialRecord) and not r.retried]


def test_sshd_down_for_10_s_mid_sweep(testbed: Testbed, tmp_path: Path):
    (tmp_path / "m.yaml").write_text(MATRIX.replace("order: sequential", "order: sequential\nreplicates: 3"))
    files = {**ENV_FILES, "decode": "/etc/sglang/decode.env"}
    before = snapshot(testbed, files)
    run_dir = tmp_path / "reports" / "outage"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.cli.main",
            "run",
            str(tmp_path / "m.yaml"),
            "-i",
            str(testbed.inventory),
            "--out",
            str(tmp_path / "reports"),
            "--run-id",
            "outage",
            "--retries",
            "5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(trials_of(run_dir)) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.1)
        cut = time.monotonic()
        # sshd back in 10 s (a timer inside the host), then every sshd process killed: orch's connection too
        testbed.ssh(
            "decode",
            "systemd-run --quiet --on-active=10s --timer-property=AccuracySec=100ms --unit=orch-sshd-back "
            "systemctl start orch-sshd.service && systemctl stop orch-sshd.service && "
            "pkill -KILL -x sshd",
            check=False,
        )
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    trials = trials_of(run_dir)
    assert sorted(t.trial for t in trials) == list(range(12)), output  # nothing lost, nothing twice
    assert all(t.status == "completed" for t in trials)
    retried = [t for t in trials if t.attempt > 1]
    assert retried, "no trial met the outage: " + output
    assert "retrying" in output and "decode (" in output
    assert max(time.monotonic() - cut, 0) >= 10
    print(
        f"\nsshd outage: {len(retried)} trial(s) retried (attempts {[t.attempt for t in retried]}); "
        f"{len(trials)} of 12 trials completed"
    )
    assert snapshot(testbed, files) == before
    no_leftovers(testbed)
