"""{run_dir} and {trial_dir} are absolute paths. The repro and its warm-up run with the run folder
as their working directory, so a relative path (`--out reports/`, the default) named a folder that
does not exist from there: `touch {run_dir}/x` failed with 'No such file or directory' on a run
started as `orch run m.yaml --out w/reports` (the seventh new-user walk). On the fakes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fakes import FakeUnit, Role, flag, make_bed, make_plan, remote_repro, runner_for


def test_run_dir_and_trial_dir_placeholders_are_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})
    repro = remote_repro("decode", "fake-repro --trial {trial} --dirs {run_dir} {trial_dir}")
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1, repro=repro)
    runner_for(bed, plan, Path("reports") / "r1", infra_attempts=1, stop_after_repeated_failures=0).execute()
    sent = [c for c in bed.transports["decode"].commands() if c.startswith("fake-repro")]
    assert len(sent) == 2, sent
    for command in sent:
        run_dir, trial_dir = command.split(" --dirs ")[1].split()
        assert run_dir == os.path.join(tmp_path, "reports", "r1")
        assert Path(trial_dir).parent == tmp_path / "reports" / "r1" / "trials"
