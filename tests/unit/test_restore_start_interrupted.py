"""A Ctrl-C or SIGTERM that lands as the trial loop ends, before the restore's own handling of
interrupts is in place (status.json's last write, the restore's first lines: ~10 ms), on the fakes.

Found by the kill-point harness (bench_kill_points.py --command hunt, seed 502: SIGINT twice, the
first 0.1 ms into the hunt's final restore): the interrupt went past the restore, the command
exited 130 with decode's env file on the last configuration's flags, and status.json named no host
as not restored. A first interrupt during the restore marks the run interrupted and the restore
goes on; one a moment before it must do the same."""

from __future__ import annotations

from pathlib import Path

from fakes import Role, flag, make_bed, make_plan, runner_for

from orchestrator.errors import Interrupted
from orchestrator.sweep.progress import QuietProgress

ORIGINAL = "# decode\nDECODE_FLAG=0\n"


class StopInterrupted(QuietProgress):
    """The signal lands while the loop's end is written to status.json (progress.stop)."""

    def __init__(self) -> None:
        self.stops = 0
        self.ended: list[list[str]] = []

    def stop(self) -> None:
        self.stops += 1
        if self.stops == 1:
            raise Interrupted("received SIGTERM")

    def restore_ended(self, not_restored: list[str]) -> None:  # type: ignore[override]
        self.ended.append(list(not_restored))


def test_an_interrupt_as_the_trial_loop_ends_still_restores_every_host(tmp_path: Path) -> None:
    bed = make_bed({"decode": Role(ORIGINAL)})
    plan = make_plan(bed, {"f": flag("decode", "DECODE_FLAG", ("1", "2"))})
    runner = runner_for(bed, plan, tmp_path / "run")
    progress = runner.progress = StopInterrupted()
    runner.guard.progress = runner.services.progress = progress
    result = runner.execute()
    assert result.completed == 2
    assert result.interrupted  # exit 130: the signal is not lost, only the restore comes first
    assert result.not_restored == [] and progress.ended == [[]]
    assert bed.transports["decode"].files[bed.env_file("decode")] == ORIGINAL.encode()
