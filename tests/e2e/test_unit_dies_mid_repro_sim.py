"""A unit that dies while the repro runs served only part of it: on the bundled simulator the
repro kills decode's server halfway and goes on (as an OOM kill or a crash would), and every such trial is
void ("died during the repro"), never data; the hosts are restored afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.sim_sweep import ENV_FILES, make_inventory

from orchestrator.cli.main import main
from orchestrator.core.records import TrialRecord
from orchestrator.store.journal import read_journal

pytestmark = pytest.mark.sim

MATRIX = """\
name: dies
factors:
  overlap:
    env: {{decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}}
    levels: [on, off]
order: sequential
stop_after_repeated_failures: 0
repro:
  command: "sleep 1; kill -9 $(cat {pid_file}); sleep 0.5; echo 'CORRUPTION sessions: 0/8'"
  timeout: 60
  metrics:
    corruption: {{kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}}
"""


def test_a_unit_that_dies_during_the_repro_voids_the_trial(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv, _ = make_inventory(tmp_path)  # its state_dir (tmp_path/state) holds each unit's pid file
    (tmp_path / "m.yaml").write_text(MATRIX.format(pid_file=tmp_path / "state" / "t-decode.pid"))
    originals = {n: (tmp_path / n).read_bytes() for n in ENV_FILES}
    reports = tmp_path / "reports"
    code = main(["run", str(tmp_path / "m.yaml"), "-i", str(inv), "--out", str(reports), "--run-id", "dies"])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    trials = [r for r in read_journal(reports / "dies" / "journal.jsonl").records if isinstance(r, TrialRecord)]
    assert sorted((t.trial, t.attempt) for t in trials) == [(0, 1), (0, 2), (1, 1), (1, 2)], out + err  # each attempt
    for t in trials:
        assert t.status == "failed" and t.metrics == {} and t.failure is not None, t
        assert t.failure.error == "IdentityError", t.failure
        assert "unit t-decode died during the repro" in t.failure.message, t.failure.message
    for name, data in originals.items():
        assert (tmp_path / name).read_bytes() == data, name
