"""A run killed with kill -9 in its first edited trial, on the fakes (tests/fakes.py): decode
holds a cell's file, and both copies of the original (the run folder's backup/decode.env and the
host's .orch-backup-<run>) are there. For the tests of what comes after: `orch restore`, a
resume, and what each writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeBed, FakeUnit, Reply, Role, flag, make_bed, make_plan, runner_for

from orchestrator.core.steps import Plan
from orchestrator.sweep.hosts import HostGuard, host_backup_path

RUN_ID = "fake-run"  # fakes.runner_for's
ORIGINAL = b"DECODE_FLAG=0\n"


class Killed(BaseException):
    """Stands for kill -9 of the controller: nothing after it runs (no restore)."""


def killed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeBed, Plan]:
    """The bed and plan of a run killed in its first edited trial; its folder is tmp_path/run."""
    bed = make_bed({"decode": Role(ORIGINAL.decode(), [FakeUnit("decode-server", active=True)])})
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=2)
    edited = next(s.trial.index for s in plan.steps if s.env.get("decode", {}).get("DECODE_FLAG") == "1")

    def kill(text: str, argv: object) -> Reply:
        raise Killed

    bed.transports["decode"].script(f"fake-repro --trial {edited}", kill, times=1)
    with monkeypatch.context() as mp:
        mp.setattr(HostGuard, "restore", lambda self, run_dir: [])
        with pytest.raises(Killed):
            runner_for(bed, plan, tmp_path / "run").execute()
    files, env = bed.transports["decode"].files, bed.env_file("decode")
    assert files[env] == b"DECODE_FLAG=1\n" and files[host_backup_path(env, RUN_ID)] == ORIGINAL
    return bed, plan
