"""A run's controller is named in status.json before it touches any host.

Found by the kill-point harness (bench/bench_kill_points.py): a controller SIGKILLed during its
backup left its hosts holding the run's copies (`<env>.orch-backup-<run>`, the units' record) and
its locks, yet `orch status` did not list the run at all: status.json was first written after the
backup, by progress.start. The parallel path already started its progress before its runners
backed up; the single-testbed runner now does too. On the fakes: whatever the progress is told at
start, no host holds a copy yet.
"""

from __future__ import annotations

from pathlib import Path

from fakes import FakeBed, FakeUnit, Role, flag, make_bed, make_plan

from orchestrator.sweep.progress import QuietProgress
from orchestrator.sweep.runner import Runner, RunOptions

ORIGINAL = "# decode\nDECODE_FLAG=0\n"


class SeesHosts(QuietProgress):
    """A progress that notes, when the sweep starts it, which orch files each host holds."""

    def __init__(self, bed: FakeBed) -> None:
        self.bed = bed
        self.at_start: list[str] | None = None
        self.at_first_trial: list[str] | None = None

    def _orch_files(self) -> list[str]:
        files = [p for t in self.bed.transports.values() for p in t.files]
        return sorted(p for p in files if ".orch-backup-" in p or ".orch-units-" in p)

    def start(self, total: int, done: int) -> None:
        self.at_start = self._orch_files()

    def trial_done(self, record: object) -> None:
        if self.at_first_trial is None:
            self.at_first_trial = self._orch_files()


def _run(tmp_path: Path) -> SeesHosts:
    bed = make_bed({"decode": Role(ORIGINAL, [FakeUnit("decode-server", active=True)])})
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")})
    seen = SeesHosts(bed)
    runner = Runner(
        plan, bed.deployment, tmp_path / "run", RunOptions("r1", retry_backoff_s=0.0), progress=seen, client=bed.client
    )
    result = runner.execute()
    assert result.completed == len(plan.steps) and not result.not_restored
    return seen


def test_the_progress_starts_before_the_backup_writes_a_copy_on_any_host(tmp_path: Path) -> None:
    seen = _run(tmp_path)
    assert seen.at_start == [], f"hosts already held {seen.at_start} when status.json was first written"
    # the copy is there once trials run (the restore removes it): the start came before it, not after
    assert seen.at_first_trial is not None
    assert any(p.endswith(".orch-backup-r1") for p in seen.at_first_trial), seen.at_first_trial
