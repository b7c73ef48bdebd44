"""`orch resume` of a plain sweep applies the journal's damage rule (store.runtrials) before it
touches a host, as the report, export, compare and an adaptive or hunt resume do.

Before, a plain resume read only each line's head (store.journal.trial_statuses) and went on: a
duplicated line, or a trial moved to another cell, ran every remaining trial on the hosts and
ended with "report not written: journal.jsonl:N: ..." (a trial moved to another cell was skipped
as done); damage deeper in a line ran them all and then failed at the end (exit 2 after hours of
trials, run.json never told how the run ended, no report). A journal only orch's appends wrote
(its status index covers it, written after it) is still answered from the index, without a read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.manifests import planned

from orchestrator.core.records import EventRecord, MetricValue, RunManifest, TrialRecord
from orchestrator.errors import ConfigError
from orchestrator.store.journal import Journal, index_path
from orchestrator.sweep import api, session
from orchestrator.sweep.progress import QuietProgress

STAMP = "2026-05-09T07:00:00.000+00:00"


class Connected(Exception):
    """Raised by the fake connect: resume got past every check, to the hosts."""


@pytest.fixture
def no_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    def connect(testbed):  # type: ignore[no-untyped-def]
        raise Connected(testbed.name)

    monkeypatch.setattr(session, "connect", connect)


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


def resume(run_dir: Path) -> None:
    api.resume(api.ResumeRequest(run_dir), lambda started: QuietProgress(), warn=lambda message: None)


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
