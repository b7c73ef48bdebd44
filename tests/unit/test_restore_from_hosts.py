"""`orch restore --testbed NAME`: a run killed (-9) whose folder was deleted since is put back from
the copies of the env files it left on its hosts (sweep.hostrestore), with the checks `orch
restore RUN_DIR` makes: the lock, symlinks, a folder that is still there (on the fakes).

Before, the only way back was moving each `<env file>.orch-backup-<run>` over its env file by hand:
`orch resume`/`orch restore` of the folder failed ("not a run directory"), and `orch run
--break-lock` refused, rightly, to back up a cell as the original."""

from __future__ import annotations

import json
import os
import re
import socket
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from fakes import FakeBed, FakeTransport, FakeUnit, Reply, Role, flag, make_bed, make_plan, runner_for

from orchestrator.cli import output
from orchestrator.edges.lock import LockInfo, StaleLockError, TestbedLock, lock_path
from orchestrator.errors import ConfigError, LockError, UsageError
from orchestrator.sweep.apitypes import RestoreOutcome
from orchestrator.sweep.hostrestore import restore_testbed, run_to_restore
from orchestrator.sweep.hosts import HostGuard, host_backup_path
from orchestrator.sweep.hostunits import host_units_path
from orchestrator.sweep.progress import QuietProgress

RUN_ID = "fake-run"  # fakes.runner_for's
DEAD_PID = 4_194_305  # above the largest pid_max Linux allows (2^22): never a live process
ORIGINAL = {"decode": b"DECODE_FLAG=0\n", "prefill": b"P=1\n"}


class Killed(BaseException):
    """Stands for kill -9 of the controller: nothing after it runs (no restore, no lock release)."""


def killed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, old_orch: bool = False) -> FakeBed:
    """A run killed in its first trial that edits decode, its testbed locked by its dead controller,
    its run folder deleted since: decode holds a cell's file; each host its copy of the original,
    and beside it the record of its units' states before the run (sweep.hostunits), unless
    `old_orch`: a run by an orch from before, which wrote none."""
    bed = make_bed(
        {
            "decode": Role(ORIGINAL["decode"].decode(), [FakeUnit("decode-server", active=True)]),
            "prefill": Role(ORIGINAL["prefill"].decode(), [FakeUnit("prefill-server")]),
        }
    )
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=2)
    edited = next(s.trial.index for s in plan.steps if s.env.get("decode", {}).get("DECODE_FLAG") == "1")

    def kill(text: str, argv: object) -> Reply:
        raise Killed

    for transport in bed.transports.values():  # wherever the repro runs
        transport.script(f"fake-repro --trial {edited}", kill, times=1)
    with monkeypatch.context() as mp:
        mp.setattr(HostGuard, "restore", lambda self, run_dir: [])
        with pytest.raises(Killed):
            runner_for(bed, plan, tmp_path / "run").execute()
    for transport in bed.transports.values():  # sweep.hosts.unrestored_runs: the copies beside the env file
        transport.script(re.compile("orch-unrestored"), lambda text, argv, t=transport: listing(t, argv))
    for role in bed.deployment.hosts:  # the lock its dead controller left, naming the folder since deleted
        write_lock(
            bed, role, LockInfo(RUN_ID, "ann", DEAD_PID, socket.gethostname(), "t", "fakebed", str(tmp_path / "run"))
        )
    os.rename(tmp_path / "run", tmp_path / "deleted")
    assert bed.file("decode") == b"DECODE_FLAG=1\n"
    if old_orch:
        for role, transport in bed.transports.items():
            del transport.files[host_units_path(bed.env_file(role), RUN_ID)]
    return bed


class RecordingProgress(QuietProgress):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, message: str) -> None:
        self.notes.append(message)


def listing(transport: FakeTransport, argv: Sequence[str] | None) -> Reply:
    prefix = argv[-1] if argv else ""
    return Reply(0, "".join(f"{path}\n" for path in sorted(transport.files) if path.startswith(prefix)))


def folder_back(tmp_path: Path) -> None:
    """The deleted run folder back (run.json: what makes it a run's)."""
    os.rename(tmp_path / "deleted", tmp_path / "run")
    (tmp_path / "run" / "run.json").write_text("{}")


def write_lock(bed: FakeBed, role: str, info: LockInfo) -> None:
    handle = bed.deployment.hosts[role]
    bed.transports[role].files[lock_path(handle, "fakebed")] = (json.dumps(info.__dict__) + "\n").encode()


def test_the_hosts_are_put_back_from_their_own_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bed = killed_run(tmp_path, monkeypatch, old_orch=True)
    assert run_to_restore(bed.deployment, None) == RUN_ID  # the run the lock names
    restarts_before = Counter(bed.restarts())
    outcome = restore_testbed(bed.deployment, RUN_ID, QuietProgress())
    assert outcome.not_restored == () and outcome.backed_up
    # without the folder no file is known to be the run's cell: decode's (a cell's) is kept aside
    # (sweep.drift "unsure"), prefill's held its original
    drifted = f"{bed.env_file('decode')}.orch-drift-{RUN_ID}"
    assert outcome.kept == (("decode", drifted),)
    for role, original in ORIGINAL.items():  # byte-identical, the copies and the lock gone
        aside = {drifted: b"DECODE_FLAG=1\n"} if role == "decode" else {}
        assert bed.transports[role].files == {bed.env_file(role): original, **aside}, role
    # which units ran before the run was in its folder: every unit running now (decode's ran on the
    # cell; prefill's was started by the run) is restarted on its original env file, none stopped
    assert Counter(bed.restarts()) - restarts_before == Counter(["decode:decode-server", "prefill:prefill-server"])
    assert bed.states() == {"decode:decode-server": True, "prefill:prefill-server": True}
    assert bed.refused() == []


def test_the_units_left_running_are_named_with_the_way_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """prefill-server was stopped before the run, which started it; without the folder orch cannot
    know that and leaves it running. Before, the outcome said "units back" and named no unit: the
    user had no way to find the one left in a changed state. Every unit left running is now named,
    per host, with how to stop one the run started, and "units back" is not claimed. (A copy left by
    an orch from before, without the record of the units' states: see the tests after this one.)"""
    bed = killed_run(tmp_path, monkeypatch, old_orch=True)
    outcome = restore_testbed(bed.deployment, RUN_ID, QuietProgress())
    assert outcome.left_running == (("decode", "decode-server"), ("prefill", "prefill-server"))
    output.show_restore(RestoreOutcome(None, RUN_ID, (outcome,), again="orch restore --testbed fakebed"))
    said = capsys.readouterr()
    assert "units back" not in said.out
    assert "restored: decode, prefill (env files byte-identical)" in said.out
    shown = said.out + said.err
    named = "decode: decode-server; prefill: prefill-server"
    assert f"left running, not known whether they ran before run fake-run: {named}" in shown
    assert "systemctl stop UNIT" in shown


def test_units_not_running_before_the_run_are_stopped_by_the_hosts_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """prefill-server was stopped before the run, which started it. Before, a restore without the
    folder left it running (named, with `systemctl stop UNIT` for the user to run): the state was
    only in the deleted folder. The backup now records it beside each host's copy, and the restore
    stops it, says so, and restarts decode-server (which ran before) on its original."""
    bed = killed_run(tmp_path, monkeypatch)
    for role in ORIGINAL:  # the record, beside the copy, written like it (mode and owner)
        record = host_units_path(bed.env_file(role), RUN_ID)
        ran = role == "decode"
        assert json.loads(bed.transports[role].files[record]) == {f"{role}-server": ran}
        copy = host_backup_path(bed.env_file(role), RUN_ID)
        assert bed.transports[role].mode_of(record) == bed.transports[role].mode_of(copy)
    assert bed.states() == {"decode:decode-server": True, "prefill:prefill-server": True}
    restarts_before = Counter(bed.restarts())
    outcome = restore_testbed(bed.deployment, RUN_ID, QuietProgress())
    assert outcome.not_restored == ()
    assert bed.states() == {"decode:decode-server": True, "prefill:prefill-server": False}
    assert Counter(bed.restarts()) - restarts_before == Counter(["decode:decode-server"])
    assert outcome.stopped == (("prefill", "prefill-server"),) and outcome.left_running == ()
    drifted = f"{bed.env_file('decode')}.orch-drift-{RUN_ID}"
    for role, original in ORIGINAL.items():  # the records removed with the copies
        aside = {drifted: b"DECODE_FLAG=1\n"} if role == "decode" else {}
        assert bed.transports[role].files == {bed.env_file(role): original, **aside}, role
    output.show_restore(RestoreOutcome(None, RUN_ID, (outcome,), again="orch restore --testbed fakebed"))
    said = capsys.readouterr().out
    assert "restored: decode, prefill (env files byte-identical, units back)" in said
    assert "stopped, not running before run fake-run: prefill: prefill-server" in said
    assert "left running" not in said and "systemctl stop" not in said
    assert bed.refused() == []


def test_a_unit_that_ran_before_and_is_down_now_is_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bed = killed_run(tmp_path, monkeypatch)
    bed.managers["decode"].stop("decode-server")  # crashed, or stopped by hand, after the kill
    progress = RecordingProgress()
    outcome = restore_testbed(bed.deployment, RUN_ID, progress)
    assert bed.states() == {"decode:decode-server": True, "prefill:prefill-server": False}
    assert outcome.stopped == (("prefill", "prefill-server"),) and outcome.left_running == ()
    said = [n for n in progress.notes if "read from the record beside each host's copy" in n]
    assert len(said) == 1 and "prefill: prefill-server" in said[0], progress.notes


@pytest.mark.parametrize("record", [b"not json", b'{"prefill-server": "no"}', b"[true]"])
def test_a_record_orch_did_not_write_is_refused_before_any_host_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: bytes
) -> None:
    bed = killed_run(tmp_path, monkeypatch)
    path = host_units_path(bed.env_file("prefill"), RUN_ID)
    bed.transports["prefill"].files[path] = record
    with pytest.raises(ConfigError, match=rf"{re.escape(path)}: not the record .*nothing was touched.*remove it"):
        restore_testbed(bed.deployment, RUN_ID, QuietProgress())
    assert bed.file("decode") == b"DECODE_FLAG=1\n"  # not written
    assert bed.states() == {"decode:decode-server": True, "prefill:prefill-server": True}
    bed.transports["prefill"].links[path] = "/etc/elsewhere.json"
    with pytest.raises(ConfigError, match=r"a symlink.*nothing was touched"):
        restore_testbed(bed.deployment, RUN_ID, QuietProgress())
    assert json.loads(bed.transports["decode"].files[lock_path(bed.deployment.hosts["decode"], "")])["pid"] == DEAD_PID


def test_a_symlinked_copy_is_refused_before_any_host_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bed = killed_run(tmp_path, monkeypatch)
    copy = host_backup_path(bed.env_file("prefill"), RUN_ID)  # whichever host is restored first
    bed.transports["prefill"].links[copy] = "/etc/elsewhere.env"  # a link where orch wrote a file
    with pytest.raises(ConfigError, match=r"a symlink.*nothing was touched"):
        restore_testbed(bed.deployment, RUN_ID, QuietProgress())
    assert bed.file("decode") == b"DECODE_FLAG=1\n"  # not written
    assert host_backup_path(bed.env_file("decode"), RUN_ID) in bed.transports["decode"].files
    assert json.loads(bed.transports["decode"].files[lock_path(bed.deployment.hosts["decode"], "")])["pid"] == DEAD_PID


def test_a_live_controllers_lock_is_never_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bed = killed_run(tmp_path, monkeypatch)
    me = LockInfo(RUN_ID, "ann", os.getppid(), socket.gethostname(), "t", "fakebed", "")  # alive: not stale
    for role in bed.deployment.hosts:
        write_lock(bed, role, me)
    with pytest.raises(LockError) as err:
        restore_testbed(bed.deployment, RUN_ID, QuietProgress())
    assert not isinstance(err.value, StaleLockError)
    assert bed.file("decode") == b"DECODE_FLAG=1\n"


def test_another_dead_runs_lock_is_taken_only_with_break_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bed = killed_run(tmp_path, monkeypatch)
    other = LockInfo("other-run", "bob", DEAD_PID, socket.gethostname(), "t", "fakebed", "")
    for role in bed.deployment.hosts:
        write_lock(bed, role, other)
    with pytest.raises(StaleLockError, match="other-run"):
        restore_testbed(bed.deployment, RUN_ID, QuietProgress())
    assert bed.file("decode") == b"DECODE_FLAG=1\n"
    restore_testbed(bed.deployment, RUN_ID, QuietProgress(), break_lock=True)
    assert bed.file("decode") == ORIGINAL["decode"]


def test_a_run_whose_folder_is_there_is_restored_from_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its folder knows which units ran before the run: that restore is asked for instead."""
    bed = killed_run(tmp_path, monkeypatch)
    folder_back(tmp_path)
    with pytest.raises(UsageError, match=rf"folder is there.*orch restore {tmp_path / 'run'}"):
        restore_testbed(bed.deployment, RUN_ID, QuietProgress())
    assert bed.file("decode") == b"DECODE_FLAG=1\n"


def test_a_run_still_running_is_said_running_not_sent_to_restore_from_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the tenth new-user walk (real hosts): `orch restore --testbed` while the run was
    live said "its folder is there ... (restore from it: orch restore DIR)", and that command then
    refused, the run being alive. The live holder is said first, as `orch restore DIR` says it."""
    bed = killed_run(tmp_path, monkeypatch)
    folder_back(tmp_path)
    live = LockInfo(RUN_ID, "ann", os.getppid(), socket.gethostname(), "t", "fakebed", str(tmp_path / "run"))
    for role in bed.deployment.hosts:
        write_lock(bed, role, live)
    with pytest.raises(LockError) as err:
        restore_testbed(bed.deployment, RUN_ID, QuietProgress())
    assert not isinstance(err.value, StaleLockError)
    assert f"pid {os.getppid()}" in str(err.value) and "that run is still running: stop it first" in str(err.value)
    assert "restore from it" not in str(err.value)
    assert f"`kill -TERM {os.getppid()}` restores its hosts" in str(err.value)  # how to stop it, as for another run
    assert bed.file("decode") == b"DECODE_FLAG=1\n"


def test_nothing_to_restore_and_several_runs_are_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bed = killed_run(tmp_path, monkeypatch)
    with pytest.raises(UsageError, match="no host holds a copy of its env file left by run nope"):
        restore_testbed(bed.deployment, "nope", QuietProgress(), break_lock=True)
    write_lock(bed, "prefill", LockInfo("second", "bob", DEAD_PID, socket.gethostname(), "t", "fakebed", ""))
    with pytest.raises(UsageError, match=r"several runs .*fake-run, second.*--run-id"):
        run_to_restore(bed.deployment, None)
    fresh = make_bed({"decode": Role("X=0\n")})
    fresh.transports["decode"].script(re.compile("orch-unrestored"), Reply(0, ""))
    with pytest.raises(UsageError, match="nothing to restore"):
        run_to_restore(fresh.deployment, None)


def test_a_stale_lock_whose_run_folder_is_gone_says_so_and_how_to_restore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The advice of a dead run's lock named `orch resume DIR` / `orch restore DIR` of a folder
    deleted since ("not a run directory"): it now says the folder is not there, and the command
    that restores the hosts from their copies, with this run's inventory."""
    bed = killed_run(tmp_path, monkeypatch)
    lock = TestbedLock.for_run(bed.deployment, "next", "now", run_dir=tmp_path / "next", inventory=Path("inv.yaml"))
    with pytest.raises(StaleLockError) as err:
        lock.check()
    text = str(err.value)
    assert f"no run folder is at {tmp_path / 'run'}" in text
    assert f"`orch restore --testbed fakebed --run-id {RUN_ID} -i inv.yaml` puts the hosts back" in text
    folder_back(tmp_path)  # the folder is there: no such caveat
    with pytest.raises(StaleLockError) as err:
        lock.check()
    assert "no run folder" not in str(err.value) and f"orch restore {tmp_path / 'run'}" in str(err.value)
