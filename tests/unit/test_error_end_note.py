""" "The sweep stopped on an error; every host was restored": said once a sweep that orch stopped on
an error of its own (an OrchError) has put every host it changed back, and only then (on the
fakes, no process).

Found by mutation testing (bench/mutants.py on sweep/runner.py's _sweep): no test read the line,
so a change that said it at the end of every run that went well, or never, passed the suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeBed, FakeUnit, Role, flag, make_bed, make_plan
from helpers.notes import Notes

from orchestrator.core.steps import Plan
from orchestrator.errors import OrchError
from orchestrator.sweep.hosts import HostGuard
from orchestrator.sweep.runner import Runner, RunOptions

SAID = "the sweep stopped on an error; every host was restored"


def _runner(tmp_path: Path) -> tuple[Runner, Notes, FakeBed, Plan]:
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")})
    notes = Notes()
    options = RunOptions("fake-run", retry_backoff_s=0.0)
    return Runner(plan, bed.deployment, tmp_path / "run", options, progress=notes, client=bed.client), notes, bed, plan


def _stops_after_a_trial(runner: Runner, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """The sweep ends with `error` once its first trial has edited decode."""
    real = runner._run_with_retries

    def then_fail(step: object) -> object:
        real(step)  # type: ignore[arg-type]
        raise error

    monkeypatch.setattr(runner, "_run_with_retries", then_fail)


def test_a_run_that_went_well_never_says_it_stopped_on_an_error(tmp_path: Path) -> None:
    runner, notes, bed, _ = _runner(tmp_path)
    assert runner.execute().not_restored == []
    assert SAID not in notes.lines


def test_a_sweep_stopped_on_an_orch_error_says_every_host_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, notes, bed, _ = _runner(tmp_path)
    _stops_after_a_trial(runner, monkeypatch, OrchError("the journal cannot be written"))
    with pytest.raises(OrchError):
        runner.execute()
    assert bed.transports["decode"].files[bed.env_file("decode")] == b"DECODE_FLAG=0\n"
    assert notes.lines.count(SAID) == 1


def test_a_host_left_changed_is_not_called_restored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner, notes, bed, _ = _runner(tmp_path)
    _stops_after_a_trial(runner, monkeypatch, OrchError("the journal cannot be written"))

    def unreachable(self: HostGuard, role: str) -> None:
        raise OrchError("ssh: connect to host: No route to host")

    monkeypatch.setattr(HostGuard, "_restore_one", unreachable)
    with pytest.raises(OrchError):
        runner.execute()
    assert runner.result is not None and runner.result.not_restored == ["decode"]
    assert SAID not in notes.lines


def test_an_error_before_any_host_was_changed_claims_no_restore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, notes, bed, _ = _runner(tmp_path)

    def refused(*args: object) -> None:
        raise OrchError("decode: the env file is not writable")

    monkeypatch.setattr(runner.guard, "backup", refused)
    with pytest.raises(OrchError):
        runner.execute()
    assert SAID not in notes.lines


def test_a_bug_is_not_called_an_error_the_sweep_stopped_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not an OrchError: a bug in orch, which the CLI reports as one; the hosts are still put back."""
    runner, notes, bed, _ = _runner(tmp_path)
    _stops_after_a_trial(runner, monkeypatch, RuntimeError("a bug"))
    with pytest.raises(RuntimeError):
        runner.execute()
    assert bed.transports["decode"].files[bed.env_file("decode")] == b"DECODE_FLAG=0\n"
    assert SAID not in notes.lines
