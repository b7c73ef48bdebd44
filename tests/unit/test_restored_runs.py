"""A run whose hosts were put back already (its host-side backups gone): `orch restore` and
`orch resume` must not write the run's old originals over a file edited since (on the fakes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fakes import FakeBed, FakeUnit, Reply, Role, flag, make_bed, make_plan, runner_for
from helpers.killed_runs import ORIGINAL, RUN_ID, Killed, killed_run

from orchestrator.core.steps import Plan
from orchestrator.errors import ConfigError, UsageError
from orchestrator.sweep.hosts import MAX_BACKUP_BYTES, HostGuard, host_backup_path
from orchestrator.sweep.hostunits import host_units_path


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


# ---------------------------------------------------------------- a run folder edited after a kill -9
def _untouched(bed: FakeBed) -> None:
    files, env = bed.transports["decode"].files, bed.env_file("decode")
    assert files[env] == b"DECODE_FLAG=1\n", "the host was written"
    assert files[host_backup_path(env, RUN_ID)] == ORIGINAL, "the host's own copy of the original went"


def test_restore_of_a_killed_run_puts_the_original_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bed, plan = killed_run(tmp_path, monkeypatch)
    runner = runner_for(bed, plan, tmp_path / "run")
    assert runner.adopt_backup() and runner.restore() == []
    assert bed.transports["decode"].files == {bed.env_file("decode"): ORIGINAL}


def test_restore_refuses_a_run_folder_backup_that_differs_from_the_hosts_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tampered backup/decode.env was written onto the host, and the host's true copy deleted."""
    bed, plan = killed_run(tmp_path, monkeypatch)
    (tmp_path / "run" / "backup" / "decode.env").write_bytes(b"EVIL_INJECTED=1\n")
    with pytest.raises(ConfigError, match=r"backup/decode\.env vs decode .*orch-backup-fake-run.*Nothing was touched"):
        runner_for(bed, plan, tmp_path / "run").adopt_backup()
    _untouched(bed)


def test_restore_refuses_a_backup_that_is_a_symlink(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bed, plan = killed_run(tmp_path, monkeypatch)
    elsewhere = tmp_path / "elsewhere.env"
    elsewhere.write_bytes(ORIGINAL)  # even with the right bytes: orch never writes a link there
    backup = tmp_path / "run" / "backup" / "decode.env"
    backup.unlink()
    backup.symlink_to(elsewhere)
    with pytest.raises(ConfigError, match=r"backup/decode\.env: not a regular file \(a symlink\)"):
        runner_for(bed, plan, tmp_path / "run").adopt_backup()
    _untouched(bed)


def test_restore_refuses_an_oversized_backup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bed, plan = killed_run(tmp_path, monkeypatch)
    with open(tmp_path / "run" / "backup" / "decode.env", "r+b") as f:
        f.truncate(MAX_BACKUP_BYTES + 1)  # sparse: no disk, but read whole it would be 64 MiB and more
    with pytest.raises(ConfigError, match=r"backup/decode\.env: file is larger than"):
        runner_for(bed, plan, tmp_path / "run").adopt_backup()
    _untouched(bed)


def test_restore_without_the_backup_folder_names_the_hosts_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: "stopped before its first edit", and the edited host was left as it was."""
    bed, plan = killed_run(tmp_path, monkeypatch)
    shutil.rmtree(tmp_path / "run" / "backup")
    with pytest.raises(ConfigError, match=r"no backup/ .* hosts still hold .*decode .*orch-backup-fake-run"):
        runner_for(bed, plan, tmp_path / "run").adopt_backup()
    _untouched(bed)


def test_restore_of_a_run_restored_at_its_end_restarts_nothing(tmp_path: Path) -> None:
    """Before, `orch restore` of a finished run restarted every unit that was active (a model
    reload on each host) and said "restored"; the hosts were put back at the run's end already."""
    bed = make_bed({"decode": Role(ORIGINAL.decode(), [FakeUnit("decode-server", active=True)])})
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")})
    assert runner_for(bed, plan, tmp_path / "run").execute().not_restored == []
    restarts, states = bed.restarts(), bed.states()
    runner = runner_for(bed, plan, tmp_path / "run")
    assert runner.adopt_backup() and runner.restore() == []
    assert bed.restarts() == restarts and bed.states() == states
    assert runner.guard.already == {"decode"} and runner.guard.untouched == {}
    assert bed.transports["decode"].files == {bed.env_file("decode"): ORIGINAL}


# ---------------------------------------------------------------- round trips
def _backup_checks(bed: FakeBed) -> list[str]:
    return [c for c in bed.transports["decode"].commands() if c.startswith("test -e ")]


def test_restore_asks_each_host_once_whether_its_copy_of_the_original_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`orch restore` (adopt, then restore) asked it twice per host: once to compare the copy with
    the run folder's, again to learn whether the host was restored before; nothing else touches
    the host in between (the testbed's lock is held), so the first answer stands."""
    bed, plan = killed_run(tmp_path, monkeypatch)
    before = len(_backup_checks(bed))
    runner = runner_for(bed, plan, tmp_path / "run")
    assert runner.adopt_backup() and runner.restore() == []
    assert len(_backup_checks(bed)) - before == 1
    assert bed.transports["decode"].files == {bed.env_file("decode"): ORIGINAL}


def test_restore_of_a_restored_host_asks_once_too(tmp_path: Path) -> None:
    bed, plan, _ = _interrupted_run(tmp_path)
    before = len(_backup_checks(bed))
    runner = runner_for(bed, plan, tmp_path / "run")
    assert runner.adopt_backup() and runner.restore() == []
    assert len(_backup_checks(bed)) - before == 1
    assert runner.guard.already == {"decode"}


def test_resume_asks_each_host_once_whether_its_copy_of_the_original_is_there(tmp_path: Path) -> None:
    bed, plan, done = _interrupted_run(tmp_path)
    before = len(_backup_checks(bed))
    resumed = runner_for(bed, plan, tmp_path / "run").execute(done, resume=True)
    assert not resumed.interrupted and resumed.not_restored == []
    assert len(_backup_checks(bed)) - before == 1


def test_a_refused_resume_leaves_a_host_restored_before_to_its_owner(tmp_path: Path) -> None:
    """The refusal drops a host this run restored already from what the process puts back: the
    restore that ends the refused resume does not go back to it (no second read of its file, no
    'already restored; not touched' line repeating the refusal, no unit stopped or restarted).
    Mutation survivor of sweep/hosts.py's check_resumable (`restored.append` deleted)."""
    bed, plan, done = _interrupted_run(tmp_path)
    env, t = bed.env_file("decode"), bed.transports["decode"]
    bed.transports["decode"].files[env] = b"DECODE_FLAG=0\nTEAM=1\n"
    start, unit_calls = len(t.calls), len(bed.managers["decode"].calls)
    runner = runner_for(bed, plan, tmp_path / "run")
    with pytest.raises(UsageError, match=r"cannot resume: the env file changed since this run restored it"):
        runner.execute(done, resume=True)
    assert [c.op for c in t.calls[start:] if c.target == env] == ["read"]  # check_resumable's, alone
    assert runner.guard.host_lines == [] and runner.guard.untouched == {}
    assert [c.op for c in bed.managers["decode"].calls[unit_calls:] if c.op in ("restart", "stop", "start")] == []
    assert t.files[env] == b"DECODE_FLAG=0\nTEAM=1\n"


def test_a_resumed_run_killed_leaves_its_hosts_the_record_of_their_units_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Ctrl-C's restore removed the host-side copy and the units' record beside it; a resume
    writes both back before its first edit, so a kill -9 of the resumed controller leaves the host
    what `orch restore --testbed` (sweep.hostrestore) needs to put its units back, not a copy
    whose units nobody recorded. Mutation survivor of sweep/hosts.py's rewrite_host_backups."""
    bed, plan, done = _interrupted_run(tmp_path)
    env, t = bed.env_file("decode"), bed.transports["decode"]
    assert host_units_path(env, RUN_ID) not in t.files

    def kill(text: str, argv: object) -> Reply:
        raise Killed

    left = [s.trial.index for s in plan.steps if s.trial.index not in done]
    t.script(f"fake-repro --trial {left[-1]}", kill, times=1)
    with monkeypatch.context() as mp:
        mp.setattr(HostGuard, "restore", lambda self, run_dir: [])
        with pytest.raises(Killed):
            runner_for(bed, plan, tmp_path / "run").execute(done, resume=True)
    assert t.files[host_backup_path(env, RUN_ID)] == ORIGINAL
    assert json.loads(t.files[host_units_path(env, RUN_ID)]) == {"decode-server": True}
