"""Parallel testbeds on the simulator: one sweep across several copies of the deployment.

Every planned trial runs exactly once, spread over the testbeds (each sequential and locked);
the journal names each trial's testbed; every testbed is restored; Ctrl-C stops them all and
`orch resume` finishes the run on all testbeds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.inproc import orch_in
from helpers.netutil import port_open
from helpers.sim_testbeds import env_bytes, write_inventory

from orchestrator.cli.main import main
from orchestrator.core.records import TrialRecord
from orchestrator.store.journal import read_journal

pytestmark = pytest.mark.sim

ENV = {
    "prefill": "SIM_WARMUP_S=0.2\nSGLANG_DSV4_BF16_INDEX_K=1\n",
    "decode": (
        'SIM_WARMUP_S=0.2\nSGLANG_DSV4_BF16_INDEX_K=1\nSGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1\nSGLANG_EXTRA_ARGS=""\n'
    ),
    "router": "SIM_WARMUP_S=0.1\n",
}

MATRIX = """\
name: par
factors:
  cuda_graph:
    levels:
      on: {decode: {SGLANG_EXTRA_ARGS: ""}}
      off: {decode: {SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
replicates: 3
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 6 --rounds 2 --seed {trial_seed}"
  timeout: 60
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""


def inventory(tmp_path: Path, names: list[str]) -> tuple[Path, list[int]]:
    (tmp_path / "m.yaml").write_text(MATRIX)
    return write_inventory(tmp_path, names, ENV)


def trials_of(run_dir: Path) -> list[TrialRecord]:
    return [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]


def test_one_sweep_across_three_testbeds(tmp_path, capsys):
    inv, ports = inventory(tmp_path, ["tb1", "tb2", "tb3"])
    before = env_bytes(tmp_path)
    code = main(
        [
            "run",
            str(tmp_path / "m.yaml"),
            "-i",
            str(inv),
            "-t",
            "all",
            "--out",
            str(tmp_path / "reports"),
            "--run-id",
            "par",
            "--seed",
            "3",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    trials = trials_of(tmp_path / "reports" / "par")
    assert sorted(t.trial for t in trials) == list(range(12))  # every trial exactly once
    assert all(t.status == "completed" for t in trials)
    used = {t.testbed for t in trials}
    assert used == {"tb1", "tb2", "tb3"}, used
    assert env_bytes(tmp_path) == before
    assert not any(port_open(p) for p in ports)
    assert not list(tmp_path.glob("*.orch-*"))
    for name in ("tb1", "tb2", "tb3"):  # each testbed kept its own originals
        assert (tmp_path / "reports" / "par" / "backup" / name / "decode.env").read_bytes() == before[
            f"{name}-decode.env"
        ]
    assert "across 3 testbeds" in out.err


def test_ctrl_c_stops_every_testbed_and_resume_finishes(tmp_path):
    """Also where the report says whether the testbeds agree (its own sweep of 12 trials before)."""
    inv, ports = inventory(tmp_path, ["tb1", "tb2"])
    before = env_bytes(tmp_path)
    run_dir = tmp_path / "reports" / "par2"
    argv = [
        sys.executable,
        "-m",
        "orchestrator.cli.main",
        "run",
        str(tmp_path / "m.yaml"),
        "-i",
        str(inv),
        "-t",
        "tb1,tb2",
        "--out",
        str(tmp_path / "reports"),
        "--run-id",
        "par2",
        "--seed",
        "5",
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not ((run_dir / "journal.jsonl").exists() and len(trials_of(run_dir)) >= 3):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, output
    assert env_bytes(tmp_path) == before, output
    assert not any(port_open(p) for p in ports)
    done = {t.trial for t in trials_of(run_dir) if t.status in ("completed", "failed")}
    assert 3 <= len(done) < 12
    resumed = orch_in(["resume", str(run_dir)], cwd=tmp_path)  # nothing signals it: no process of its own
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    final = [t for t in trials_of(run_dir) if t.status in ("completed", "failed")]
    assert sorted(t.trial for t in final) == list(range(12))  # nothing lost, nothing twice
    assert env_bytes(tmp_path) == before
    assert not any(port_open(p) for p in ports)
    # the report says whether the testbeds agree: read from this run's page (12 trials over tb1 and
    # tb2, as a separate sweep of the same matrix on the same two testbeds gave before)
    html = (run_dir / "index.html").read_text()
    assert "Testbeds tb1, tb2 were not shown to differ" in html or "Testbeds differ in" in html
