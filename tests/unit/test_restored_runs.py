"""A run whose hosts were put back already (its host-side backups gone): `orch restore` and
`orch resume` must not write the run's old originals over a file edited since (on the fakes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeBed, FakeUnit, Reply, Role, flag, make_bed, make_plan, runner_for

from orchestrator.core.steps import Plan
from orchestrator.errors import UsageError
from orchestrator.sweep.hosts import host_backup_path

RUN_ID = "fake-run"
ORIGINAL = b"DECODE_FLAG=0\n"


def _interrupted_run(tmp_path: Path) -> tuple[FakeBed, Plan, set[int]]:
    """A run stopped by Ctrl-C in its first repro: hosts restored, host-side backups removed."""
    bed = make_bed({"decode": Role(ORIGINAL.decode(), [FakeUnit("decode-server", active=True)])})
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=2)

    def ctrl_c(text: str, argv: object) -> Reply:
        raise KeyboardInterrupt

    bed.transports["decode"].script(f"fake-repro --trial {plan.steps[0].trial.index}", ctrl_c, times=1)
    first = runner_for(bed, plan, tmp_path / "run").execute()
    files = bed.transports["decode"].files
    assert first.interrupted and files[bed.env_file("decode")] == ORIGINAL
    assert host_backup_path(bed.env_file("decode"), RUN_ID) not in files
    return bed, plan, {r.trial for r in first.records}


def test_restore_leaves_a_host_edited_since_it_was_restored_alone(tmp_path: Path) -> None:
    bed, plan, _ = _interrupted_run(tmp_path)
    env = bed.env_file("decode")
    bed.transports["decode"].files[env] = b"DECODE_FLAG=0\nTEAM=1\n"
    runner = runner_for(bed, plan, tmp_path / "run")
    assert runner.adopt_backup()
    assert runner.restore() == []
    assert bed.transports["decode"].files[env] == b"DECODE_FLAG=0\nTEAM=1\n"
    assert runner.guard.untouched == {"decode": env}
    assert bed.refused() == []


def test_resume_refuses_when_a_restored_host_holds_a_file_the_run_never_wrote(tmp_path: Path) -> None:
    bed, plan, done = _interrupted_run(tmp_path)
    env = bed.env_file("decode")
    bed.transports["decode"].files[env] = b"DECODE_FLAG=0\nTEAM=1\n"
    with pytest.raises(UsageError, match=r"cannot resume: the env file changed since this run restored it"):
        runner_for(bed, plan, tmp_path / "run").execute(done, resume=True)
    assert bed.transports["decode"].files[env] == b"DECODE_FLAG=0\nTEAM=1\n"
    assert host_backup_path(env, RUN_ID) not in bed.transports["decode"].files
    assert bed.refused() == []


@pytest.mark.parametrize("now", [ORIGINAL, b"DECODE_FLAG=1\n"], ids=["original", "a-cell-of-the-run"])
def test_resume_goes_on_when_a_restored_host_holds_the_original_or_one_of_the_runs_cells(
    tmp_path: Path, now: bytes
) -> None:
    bed, plan, done = _interrupted_run(tmp_path)
    env = bed.env_file("decode")
    bed.transports["decode"].files[env] = now
    resumed = runner_for(bed, plan, tmp_path / "run").execute(done, resume=True)
    assert not resumed.interrupted and resumed.not_restored == []
    assert bed.transports["decode"].files[env] == ORIGINAL
    assert set(bed.transports["decode"].files) == {env}
    assert bed.refused() == []
