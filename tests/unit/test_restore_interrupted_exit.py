"""`orch restore` reached by a Ctrl-C or SIGTERM exits 130, as every interrupted command does (on
the fakes). Found by the kill-point harness (bench_kill_points.py --kill-way-back restore, seed
423: SIGINT twice while it put the hosts back): the first skipped the host being restored, the
command said "not restored: prefill; run orch restore again" and exited 1, the code of a host that
could not be restored, not of a user who stopped it."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeUnit, Role, flag, make_bed, make_plan, runner_for

from orchestrator.core.records import EventRecord
from orchestrator.errors import Interrupted
from orchestrator.store.journal import read_journal
from orchestrator.sweep import apitypes
from orchestrator.sweep.hosts import HostGuard


def test_a_restore_a_ctrl_c_reached_says_so_and_the_others_are_restored(tmp_path: Path) -> None:
    roles = {r: Role(f"{r.upper()}_FLAG=0\n", [FakeUnit(f"{r}-server", active=True)]) for r in ("prefill", "decode")}
    bed = make_bed(roles)
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")})
    runner = runner_for(bed, plan, tmp_path / "run")
    runner.guard.backup()
    real = HostGuard._restore_host

    def ctrl_c_on_prefill(guard: HostGuard, role: str) -> None:
        if role == "prefill":
            raise KeyboardInterrupt
        real(guard, role)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(HostGuard, "_restore_host", ctrl_c_on_prefill)
        assert runner.guard.restore(None) == ["prefill"]  # skipped; decode still put back
    assert runner.guard.interrupted


def test_orch_restore_interrupted_exits_130_and_1_only_for_a_host_that_failed() -> None:
    def outcome(**fields: object) -> apitypes.RestoreOutcome:
        testbed = apitypes.TestbedRestore("tb", ("decode",), True, **fields)  # type: ignore[arg-type]
        return apitypes.RestoreOutcome(Path("run"), "r", (testbed,))

    assert outcome(not_restored=("decode",), interrupted=True).exit_code == 130
    assert outcome(interrupted=True).exit_code == 130  # restored all the same: still interrupted
    assert outcome(not_restored=("decode",)).exit_code == 1
    assert outcome().exit_code == 0


@pytest.mark.parametrize("stop", [Interrupted("received SIGTERM"), KeyboardInterrupt()], ids=["sigterm", "ctrl-c"])
def test_one_signal_during_a_sweeps_own_final_restore_interrupts_the_run_and_still_restores_the_host(
    tmp_path: Path, stop: BaseException
) -> None:
    """A SIGTERM is sent once (systemd, a CI timeout): landing in the restore at the end of a
    sweep that was not interrupted, it marks the run interrupted (exit 130, run_interrupted
    journaled) and the host's restore starts again; only a second one would skip a host. Mutation
    survivor of sweep/hosts.py's restore (`if first is not None` deleted: the host was skipped,
    left on the last cell's file)."""
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")})
    real, signals = HostGuard._restore_host, [stop]

    def signal_once(guard: HostGuard, role: str) -> None:
        if signals:
            raise signals.pop()
        real(guard, role)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(HostGuard, "_restore_host", signal_once)
        result = runner_for(bed, plan, tmp_path / "run").execute()
    assert result.interrupted and result.not_restored == []
    assert bed.transports["decode"].files[bed.env_file("decode")] == b"DECODE_FLAG=0\n"
    assert bed.states() == {"decode:decode-server": True}
    events = [r.event for r in read_journal(tmp_path / "run" / "journal.jsonl").records if isinstance(r, EventRecord)]
    assert "run_interrupted" in events and events[-1] == "restored"
