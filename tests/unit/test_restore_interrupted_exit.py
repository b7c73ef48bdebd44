"""`orch restore` reached by a Ctrl-C or SIGTERM exits 130, as every interrupted command does (on
the fakes). Found by the kill-point harness (bench_kill_points.py --kill-way-back restore, seed
423: SIGINT twice while it put the hosts back): the first skipped the host being restored, the
command said "not restored: prefill; run orch restore again" and exited 1, the code of a host that
could not be restored, not of a user who stopped it."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeUnit, Role, flag, make_bed, make_plan, runner_for

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
