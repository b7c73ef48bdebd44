"""session: the run directory appears whole (run.json and plan.json) or not at all, and
`orch resume` checks the rebuilt plan against the run's digest before it connects to any host."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
from pathlib import Path

import pytest
from helpers.manifests import old_format, planned

from orchestrator.core.records import EventRecord, MetricValue, RunManifest, TrialRecord
from orchestrator.errors import ConfigError, JournalError, LockError, UsageError
from orchestrator.store import manifest as runs
from orchestrator.store import runlock
from orchestrator.store.journal import Journal, index_path
from orchestrator.store.manifest import PLAN_FILE, load_manifest, save_manifest
from orchestrator.store.runlock import run_lock
from orchestrator.sweep import api, session
from orchestrator.sweep.progress import QuietProgress


class Connected(Exception):
    """Raised by the fake connect: resume got past every check."""


@pytest.fixture
def no_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    def connect(testbed):  # type: ignore[no-untyped-def]
        raise Connected(testbed.name)

    monkeypatch.setattr(session, "connect", connect)


def resume(run_dir: Path) -> None:
    api.resume(api.ResumeRequest(run_dir), lambda started: QuietProgress(), warn=lambda message: None)


def test_the_run_directory_holds_run_json_plan_json_and_status_json(tmp_path: Path) -> None:
    _, manifest = planned()
    session.create_run_dir(tmp_path / "r1", manifest)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r1"]  # no staging folder left
    # status.json from the start: a controller killed before its first trial is shown stale
    assert sorted(p.name for p in (tmp_path / "r1").iterdir()) == [PLAN_FILE, "run.json", "status.json"]
    assert load_manifest(tmp_path / "r1") == manifest


def test_a_failure_while_creating_leaves_no_run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, manifest = planned()
    real = runs.write_json_atomic

    def fail_on_run_json(path: Path, model) -> None:  # type: ignore[no-untyped-def]
        if path.name == "run.json":
            raise OSError("disk full")  # after plan.json was written
        real(path, model)

    monkeypatch.setattr(runs, "write_json_atomic", fail_on_run_json)
    with pytest.raises(OSError, match="disk full"):
        session.create_run_dir(tmp_path / "r1", manifest)
    assert list(tmp_path.iterdir()) == []  # neither the run directory nor its staging folder


def test_resume_goes_on_with_the_same_plan(tmp_path: Path, no_hosts: None) -> None:
    _, manifest = planned()
    session.create_run_dir(tmp_path / "r1", manifest)
    (tmp_path / "r1" / PLAN_FILE).unlink()  # resume reads only run.json's digest, not the trials
    with pytest.raises(Connected):
        resume(tmp_path / "r1")


def test_resume_refuses_a_changed_plan_before_touching_a_host(tmp_path: Path, no_hosts: None) -> None:
    """The matrix and inventory are unchanged, but the run's seed gives another order (as a
    different orch version might): refused with one clear error, exit 2."""
    _, manifest = planned(seed=1)
    session.create_run_dir(tmp_path / "r1", manifest.model_copy(update={"seed": 2}))
    with pytest.raises(UsageError) as err:
        resume(tmp_path / "r1")
    assert err.value.exit_code == 2
    assert "the plan rebuilt from the matrix differs from the run's plan" in str(err.value)
    assert "(resume needs the same orch version, matrix and inventory)" in str(err.value)


def test_resume_of_a_run_directory_from_before_plan_json(tmp_path: Path, no_hosts: None) -> None:
    _, manifest = planned()
    run_dir = old_format(tmp_path, manifest)
    with pytest.raises(Connected):
        resume(run_dir)
    (tmp_path / "x").mkdir()
    changed = old_format(tmp_path / "x", manifest.model_copy(update={"seed": 2}))
    with pytest.raises(UsageError, match="differs from the run's plan"):
        resume(changed)


def test_resume_keeps_plan_json_as_it_was(tmp_path: Path, no_hosts: None) -> None:
    """What resume writes back into run.json (at the end of the run) leaves plan.json alone."""
    _, manifest = planned()
    session.create_run_dir(tmp_path / "r1", manifest)
    before = (tmp_path / "r1" / PLAN_FILE).read_bytes()
    light = load_manifest(tmp_path / "r1", plan=False)
    save_manifest(tmp_path / "r1", light.model_copy(update={"status": "completed"}))
    assert (tmp_path / "r1" / PLAN_FILE).read_bytes() == before
    head = RunManifest.model_validate(json.loads((tmp_path / "r1" / "run.json").read_text()))
    assert (head.plan, head.plan_trials, head.status) == ([], 24, "completed")


def test_resume_refuses_a_run_another_process_is_running_before_touching_its_journal(
    tmp_path: Path, no_hosts: None
) -> None:
    """A run's controller holds its folder (store.runlock); a second `orch resume` beside it must
    not repair the journal's "torn" tail, which may be the line that controller is appending."""
    _, manifest = planned()
    run_dir = tmp_path / "r1"
    session.create_run_dir(run_dir, manifest)
    journal = run_dir / "journal.jsonl"
    journal.write_bytes(b'{"type": "trial", "tri')  # an append in flight, as a reader sees it
    held = rf"pid {os.getpid()} on {re.escape(socket.gethostname())} is running this run right now"
    with run_lock(run_dir), pytest.raises(LockError, match=held):
        resume(run_dir)
    assert journal.read_bytes() == b'{"type": "trial", "tri'
    with pytest.raises(Connected):  # once that process is gone, the resume goes on
        resume(run_dir)


def test_the_run_lock_is_one_holder_at_a_time_and_free_again_after(tmp_path: Path) -> None:
    with run_lock(tmp_path):
        with pytest.raises(LockError), run_lock(tmp_path):
            pass
    with run_lock(tmp_path):  # released on exit (the kernel also drops it when its holder dies)
        pass


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS])
def test_a_file_system_that_refuses_flock_is_said_so_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """A reports folder on NFS whose lock daemon is not running (flock: ENOLCK), or a mount with no
    locks at all: the OSError escaped run_lock, and `orch run` ended in a Python traceback."""

    def refuse(fd: int, operation: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(runlock.fcntl, "flock", refuse)
    with pytest.raises(JournalError, match=r"controller\.lock: cannot lock the run folder: .*choose another --out"):
        with run_lock(tmp_path):
            pass


def test_a_new_run_on_a_file_system_that_refuses_flock_is_refused_before_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused as the folder is created (exit 2, the --out to change), not once it exists: the run
    the lock refused was left behind, and `orch status` called it stale and told to resume it."""

    def refuse(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(runlock.fcntl, "flock", refuse)
    _, manifest = planned()
    run_dir = tmp_path / "reports" / "r1"
    with pytest.raises(UsageError, match=r"reports/r1/controller\.lock: cannot lock the run folder: .*--out") as info:
        session.create_run_dir(run_dir, manifest)
    assert info.value.exit_code == 2
    assert list((tmp_path / "reports").iterdir()) == []  # no run, no staging folder


@pytest.mark.parametrize(("stored", "asked", "attempts"), [(4, None, 5), (4, 0, 1), (None, None, 2)])
def test_a_resume_retries_as_the_run_was_started_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored: int | None, asked: int | None, attempts: int
) -> None:
    """An interrupted run must not fail or retry its trials differently from an uninterrupted
    one: the run's --retries is in run.json (None: an older run.json, the default of 1)."""
    _, manifest = planned()
    session.create_run_dir(tmp_path / "r1", manifest.model_copy(update={"retries": stored}))
    seen: list[int] = []

    def execute(plan, deployments, run_dir, options, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(options.infra_attempts)
        raise Connected("execute")

    monkeypatch.setattr(session, "connected", lambda testbeds: contextlib.nullcontext([]))
    monkeypatch.setattr(api, "execute", execute)
    with pytest.raises(Connected):
        api.resume(api.ResumeRequest(tmp_path / "r1", retries=asked), lambda s: QuietProgress(), warn=lambda m: None)
    assert seen == [attempts]


# ---------------------------------------------------------------- a damaged journal
# `orch resume` of a plain sweep applies the journal's damage rule (store.runtrials) before it
# touches a host, as the report, export, compare and an adaptive or hunt resume do.
#
# Before, a plain resume read only each line's head (store.journal.trial_statuses) and went on: a
# duplicated line, or a trial moved to another cell, ran every remaining trial on the hosts and
# ended with "report not written: journal.jsonl:N: ..." (a trial moved to another cell was skipped
# as done); damage deeper in a line ran them all and then failed at the end (exit 2 after hours of
# trials, run.json never told how the run ended, no report). A journal only orch's appends wrote
# (its status index covers it, written after it) is still answered from the index, without a read.

STAMP = "2026-05-09T07:00:00.000+00:00"


def _record(manifest: RunManifest, trial: int) -> TrialRecord:
    p = manifest.plan[trial]
    return TrialRecord(
        run_id=manifest.run_id,
        trial=p.trial,
        round=p.round,
        cell=p.cell,
        levels=p.levels,
        is_baseline=p.is_baseline,
        testbed=manifest.testbed,
        status="completed",
        started=STAMP,
        ended=STAMP,
        duration_s=1.0,
        metrics={"corruption": MetricValue(kind="proportion", k=1, n=10)},
    )


def killed_run(tmp_path: Path) -> tuple[Path, RunManifest]:
    """A run killed after 3 finished trials, its journal written by orch (with its status index)."""
    _, manifest = planned()
    run_dir = tmp_path / "r1"
    session.create_run_dir(run_dir, manifest)
    with Journal(run_dir / "journal.jsonl") as journal:
        journal.append(EventRecord(run_id=manifest.run_id, event="run_started", at=STAMP))
        for trial in range(3):
            journal.append(_record(manifest, trial))
    return run_dir, manifest


def _rewrite(run_dir: Path, lines: list[bytes]) -> None:
    (run_dir / "journal.jsonl").write_bytes(b"".join(lines))


def _lines(run_dir: Path) -> list[bytes]:
    return (run_dir / "journal.jsonl").read_bytes().splitlines(keepends=True)


def test_a_journal_orch_wrote_resumes(tmp_path: Path, no_hosts: None) -> None:
    run_dir, _ = killed_run(tmp_path)
    with pytest.raises(Connected):
        resume(run_dir)


def test_a_duplicated_line_is_refused_before_any_host_is_touched(tmp_path: Path, no_hosts: None) -> None:
    run_dir, _ = killed_run(tmp_path)
    lines = _lines(run_dir)
    _rewrite(run_dir, [*lines, lines[1]])  # trial 0's line again, as line 5
    with pytest.raises(ConfigError) as caught:
        resume(run_dir)
    assert caught.value.line == 5 and "trial 0 attempt 1 finished twice (also line 2)" in str(caught.value)


def test_a_trial_moved_to_another_cell_is_refused_not_skipped(tmp_path: Path, no_hosts: None) -> None:
    run_dir, manifest = killed_run(tmp_path)
    lines = _lines(run_dir)
    other = next(p for p in manifest.plan if p.cell != manifest.plan[0].cell)
    moved = json.loads(lines[1])
    moved.update(cell=other.cell, levels=other.levels)
    lines[1] = (json.dumps(moved, separators=(",", ":")) + "\n").encode()
    _rewrite(run_dir, lines)
    with pytest.raises(ConfigError, match="trial 0 is cell") as caught:
        resume(run_dir)
    assert caught.value.line == 2


def test_damage_past_a_lines_head_is_refused_before_the_trials_not_after(tmp_path: Path, no_hosts: None) -> None:
    run_dir, _ = killed_run(tmp_path)
    lines = _lines(run_dir)
    lines[2] = lines[2].replace(b'"k":1,"n":10', b'"k":11,"n":10')  # trial 1, mid-file: 11 of 10 sessions
    _rewrite(run_dir, lines)
    with pytest.raises(ConfigError, match="corruption") as caught:
        resume(run_dir)
    assert caught.value.line == 3


def test_damage_the_status_index_still_covers_is_found(tmp_path: Path, no_hosts: None) -> None:
    """A same-size edit after orch's last append: the index's entries still chain to the end, but
    the journal was written after it, so its lines are read by the rule."""
    run_dir, _ = killed_run(tmp_path)
    lines = _lines(run_dir)
    lines[2] = lines[2].replace(b'"k":1,"n":10', b'"k":9,"n": 1')  # same length: 9 of 1 session
    index = index_path(run_dir / "journal.jsonl")
    before = os.stat(index).st_mtime_ns
    _rewrite(run_dir, lines)
    os.utime(run_dir / "journal.jsonl", ns=(before + 1_000_000, before + 1_000_000))
    with pytest.raises(ConfigError, match="corruption") as caught:
        resume(run_dir)
    assert caught.value.line == 3


def test_a_journal_orch_wrote_is_answered_by_its_index_without_the_rules_read(
    tmp_path: Path, no_hosts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule's read (~3 s at 100,000 trials) is paid only when something other than orch's
    appends wrote the journal: a resume stays as fast as before."""
    run_dir, _ = killed_run(tmp_path)

    def refuse(*args: object) -> None:
        raise AssertionError("the rule's read of every line")

    monkeypatch.setattr(api, "read_run_rows", refuse)
    with pytest.raises(Connected):
        resume(run_dir)


def test_a_torn_last_line_is_cut_and_the_rest_checked_then_resumed(tmp_path: Path, no_hosts: None) -> None:
    """kill -9 mid-append: the line without its newline was never a finished trial (its append
    had not returned); resume cuts it, says so, finds the rest sound and goes on."""
    run_dir, manifest = killed_run(tmp_path)
    whole = (run_dir / "journal.jsonl").read_bytes()
    torn = _record(manifest, 3).model_dump_json().encode()[:200]
    (run_dir / "journal.jsonl").write_bytes(whole + torn)
    seen: list[api.Started] = []

    def progress(started: api.Started) -> QuietProgress:
        seen.append(started)
        return QuietProgress()

    with pytest.raises(Connected):
        api.resume(api.ResumeRequest(run_dir), progress, warn=lambda message: None)
    assert (run_dir / "journal.jsonl").read_bytes() == whole
    assert seen[0].torn_tail_dropped and seen[0].left == len(manifest.plan) - 3


def test_resume_numbers_a_cut_off_trials_attempts_past_its_journaled_ones(
    tmp_path: Path, no_hosts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trial 3 failed and was retried, the controller died during the retry: the resumed session
    numbers trial 3's attempts past 2 whatever folders are left (store.journal.last_attempts)."""
    run_dir, manifest = killed_run(tmp_path)
    with Journal(run_dir / "journal.jsonl") as journal:
        for attempt in (1, 2):
            failed = _record(manifest, 3).model_copy(
                update={"attempt": attempt, "status": "failed", "retried": True, "metrics": {}}
            )
            journal.append(failed)
    made: list[api.RunOptions] = []
    real = api.RunOptions

    def options(*args: object, **kwargs: object) -> api.RunOptions:
        made.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    monkeypatch.setattr(api, "RunOptions", options)
    with pytest.raises(Connected):
        resume(run_dir)
    assert made[0].attempts_before == {3: 2}


def test_a_dry_run_refuses_the_damaged_journal_the_resume_refuses(tmp_path: Path) -> None:
    """`orch resume --dry-run` makes the resume's own checks: a journal the resume refuses at its
    line must not be previewed as "3 of N done" (the user would then start the real resume)."""
    run_dir, _ = killed_run(tmp_path)
    lines = _lines(run_dir)
    _rewrite(run_dir, [*lines, lines[1]])  # trial 0's line again, as line 5
    with pytest.raises(ConfigError) as caught:
        api.preview_resume(run_dir)
    assert caught.value.line == 5 and "finished twice" in str(caught.value)


def test_a_dry_run_of_a_journal_orch_wrote_lists_what_is_left(tmp_path: Path) -> None:
    run_dir, manifest = killed_run(tmp_path)
    preview = api.preview_resume(run_dir)
    assert preview.done == frozenset({0, 1, 2}) and len(manifest.plan) > 3


def test_a_dry_run_reads_past_a_torn_last_line_as_the_resume_drops_it(tmp_path: Path) -> None:
    run_dir, _ = killed_run(tmp_path)
    lines = _lines(run_dir)
    _rewrite(run_dir, [*lines, lines[1][:40]])  # a kill -9 mid-write: half a line, no newline
    before = (run_dir / "journal.jsonl").read_bytes()
    assert api.preview_resume(run_dir).done == frozenset({0, 1, 2})
    assert (run_dir / "journal.jsonl").read_bytes() == before  # the dry run repairs nothing
