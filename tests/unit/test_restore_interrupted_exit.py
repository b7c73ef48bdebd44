"""`orch restore` reached by a Ctrl-C or SIGTERM exits 130, as every interrupted command does (on
the fakes). Found by the kill-point harness (bench_kill_points.py --kill-way-back restore, seed
423: SIGINT twice while it put the hosts back): the first skipped the host being restored, the
command said "not restored: prefill; run orch restore again" and exited 1, the code of a host that
could not be restored, not of a user who stopped it."""

from __future__ import annotations

import signal
import threading
import time
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


def test_a_skip_asked_while_no_host_is_being_restored_skips_nothing(tmp_path: Path) -> None:
    """A parallel sweep's main thread asks every testbed's guard to skip its host on a second
    Ctrl-C; a testbed between hosts (or done) has none: nothing is skipped, nothing raises, and
    the restore that follows still puts the host back. Mutation survivor of skip_current."""
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})
    runner = runner_for(bed, make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}), tmp_path / "run")
    runner.guard.backup()
    assert runner.guard.skip_current() is None
    assert runner.guard.restore(None) == [] and not runner.guard.interrupted


def test_a_ctrl_c_in_the_main_threads_restore_stops_that_hosts_restore_where_it_lands(tmp_path: Path) -> None:
    """Signals reach the main thread only: its restore runs each host inline, so a Ctrl-C stops
    that host's restore where it lands and nothing is written there behind the user's back once
    it is said to be skipped (a helper thread, as a runner thread uses, would go on writing).
    Mutation survivor of sweep/hosts.py's _restore_one (the main thread's inline branch deleted)."""
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})
    runner = runner_for(bed, make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}), tmp_path / "run")
    runner.guard.backup()
    env, t = bed.env_file("decode"), bed.transports["decode"]
    t.files[env] = b"DECODE_FLAG=1\n"  # a cell's file, as a trial leaves it
    real = HostGuard._restore_host

    def ctrl_c_then_restore(guard: HostGuard, role: str) -> None:
        signal.raise_signal(signal.SIGINT)  # the user's Ctrl-C, as the host's restore starts
        time.sleep(0.2)
        real(guard, role)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(HostGuard, "_restore_host", ctrl_c_then_restore)
        assert runner.guard.restore(None) == ["decode"]
    time.sleep(0.5)  # what a helper thread would still write lands by now
    assert t.files[env] == b"DECODE_FLAG=1\n"


def test_a_runner_threads_restore_stuck_on_a_host_is_skipped_when_the_main_thread_asks(tmp_path: Path) -> None:
    """A parallel testbed restores in its runner thread, which no signal reaches: the main
    thread's second Ctrl-C asks its guard to skip the host it is stuck on (a unit taking minutes
    to stop), and that restore returns at once counting the host as not restored; the helper left
    on the host is a daemon thread, so the command still exits. Mutation survivors of _restore_one
    (the job never published to skip_current; daemon=False)."""
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})
    runner = runner_for(bed, make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}), tmp_path / "run")
    runner.guard.backup()
    stuck, left = threading.Event(), list[list[str]]()

    def stuck_host(guard: HostGuard, role: str) -> None:
        stuck.wait(10)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(HostGuard, "_restore_host", stuck_host)
        thread = threading.Thread(target=lambda: left.append(runner.guard.restore(None)), name="testbed-A")
        thread.start()
        try:
            deadline, skipped = time.monotonic() + 5, None
            while skipped is None and time.monotonic() < deadline:
                skipped = runner.guard.skip_current()
                time.sleep(0.01)
            thread.join(5)
            # the abandoned helper, still stuck on the host, must not keep the command from exiting
            helpers = [t.daemon for t in threading.enumerate() if t.name == "restore-decode"]
        finally:
            stuck.set()
            thread.join()
    assert skipped == "decode" and left == [["decode"]]
    assert helpers == [True]


def test_a_unit_left_on_a_cells_env_by_a_ctrl_c_is_restarted_though_the_file_is_the_original_again(
    tmp_path: Path,
) -> None:
    """Trial 1 restarts decode on DECODE_FLAG=1; trial 2 writes the original back and the Ctrl-C
    lands before its restart: the file is the original, the unit still runs trial 1's env. The
    restore must restart it (orch restarted it on a non-original file), or the host is left
    measuring a cell with nothing on disk to show it. Mutation survivor of note_restart."""
    bed = make_bed({"decode": Role("DECODE_FLAG=0\n", [FakeUnit("decode-server", active=True)])})
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG", ("1", "0"))}, order="sequential")
    manager, calls = bed.managers["decode"], [0]
    real_restart, real_with_file = manager.restart, manager.restart_with_file

    def restart(unit: str) -> float:  # a restart after the trial's own write
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt
        return real_restart(unit)

    def restart_with_file(unit: str, transport: object, path: str, data: bytes, *, expect: object = None) -> float:
        if calls[0] == 1:  # the second restart, which writes the file itself: written, then the Ctrl-C
            transport.write_bytes_atomic(path, data, expect=expect)  # type: ignore[attr-defined]
            calls[0] += 1
            raise KeyboardInterrupt
        return real_with_file(unit, transport, path, data, expect=expect)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(manager, "restart", restart)
        mp.setattr(manager, "restart_with_file", restart_with_file)
        result = runner_for(bed, plan, tmp_path / "run").execute()
    assert calls[0] >= 2 and result.interrupted and result.not_restored == []  # the Ctrl-C landed
    assert bed.transports["decode"].files[bed.env_file("decode")] == b"DECODE_FLAG=0\n"
    assert (manager.environ("decode-server") or {}).get("DECODE_FLAG") == "0"
