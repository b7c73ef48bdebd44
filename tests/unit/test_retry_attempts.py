"""Retried trials on the fakes: every failed attempt is journaled (its error kept, the report's
count of failed attempts true) while a trial's final status stays its last attempt's for every
reader; and a retry after a health timeout starts from a freshly restarted unit of that role (one
still warming up from the failed attempt is not waited on again)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeBed, FakeUnit, Reply, Role, flag, make_bed, make_plan, runner_for

from orchestrator.core.inventory import Inventory
from orchestrator.core.records import TrialRecord
from orchestrator.core.steps import Plan
from orchestrator.edges.transport import Result
from orchestrator.errors import CommandInterrupted
from orchestrator.store.journal import last_attempts, read_journal, trial_statuses
from orchestrator.store.manifest import save_manifest
from orchestrator.store.planrecord import make_manifest
from orchestrator.sweep.api import _final_counts, _journaled
from orchestrator.sweep.hosts import HostGuard


def two_roles(decode_timeout_s: float = 5.0, **decode: Any) -> FakeBed:
    return make_bed(
        {
            "prefill": Role("PREFILL_FLAG=0\n", [FakeUnit("prefill-server", active=True)]),
            "decode": Role(
                "DECODE_FLAG=0\n",
                [FakeUnit("decode-server", **decode)],
                after=["prefill"],
                health_timeout_s=decode_timeout_s,
            ),
        }
    )


def journaled(run_dir: Path) -> list[TrialRecord]:
    return [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]


def test_every_failed_attempt_is_journaled_and_a_trials_status_is_its_last(tmp_path: Path) -> None:
    bed = two_roles(fail_starts=10**6)
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=2).execute()
    assert (result.completed, result.failed) == (0, 2)  # trials, not attempts
    assert [(r.status, r.attempt) for r in result.records] == [("failed", 2), ("failed", 2)]
    records = journaled(tmp_path / "run")
    assert [(r.trial, r.attempt, r.status) for r in records] == [
        (0, 1, "failed"),
        (0, 2, "failed"),
        (1, 1, "failed"),
        (1, 2, "failed"),
    ]
    assert all(r.failure is not None and r.failure.error == "ServiceError" for r in records)  # attempt 1's error kept
    assert trial_statuses(tmp_path / "run" / "journal.jsonl").finished == {0, 1}
    assert _final_counts(tmp_path / "run") == (2, 2)  # 2 trials finished, 2 failed: per trial, by its last record


def test_a_trial_that_fails_once_then_completes_counts_once_and_keeps_both_attempts(tmp_path: Path) -> None:
    bed = two_roles(fail_starts=1)
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1)
    run_dir = tmp_path / "run"
    result = runner_for(bed, plan, run_dir, infra_attempts=2).execute()
    assert (result.completed, result.failed) == (2, 0)
    records = journaled(run_dir)
    assert [(r.trial, r.attempt, r.status) for r in records] == [
        (0, 1, "failed"),
        (0, 2, "completed"),
        (1, 1, "completed"),
    ]
    assert _final_counts(run_dir) == (2, 0)
    # each attempt has its own folder: the failed attempt's links show its own logs, not the retry's
    failed, retried = records[0], records[1]
    assert set(failed.logs.values()).isdisjoint(retried.logs.values())
    assert all(p.startswith("trials/0000/") for p in failed.logs.values())
    assert retried.repro is not None and retried.repro.stdout_path.startswith("trials/0000-attempt2/")
    for path in failed.logs.values():
        assert (run_dir / path).exists()


def test_a_retry_after_a_health_timeout_restarts_the_unit_that_timed_out(tmp_path: Path) -> None:
    """Attempt 1 restarts decode (its env changed) and times out waiting for it; attempt 2 finds
    the file as the cell wants and the unit active (still warming up): it must restart it anyway,
    as a failed start or bad arguments do, rather than wait on the failed attempt's process."""
    bed = two_roles(decode_timeout_s=0.3, ready_after_s=3600.0)
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1)
    result = runner_for(bed, plan, tmp_path / "run", infra_attempts=2).execute()
    first = result.records[0]
    assert (first.status, first.attempt) == ("failed", 2)
    assert first.failure is not None and first.failure.error == "HealthTimeout"
    assert first.restarted == ["decode:decode-server"]  # the retry started from a fresh process
    assert len(bed.managers["decode"].restarts()) == 4  # 2 attempts x 2 trials


class Killed(BaseException):
    """Stands for kill -9 of the controller: nothing after it runs (no restore)."""


def killed_during_a_retry(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeBed, Plan]:
    """Attempt 1 of trial 0 fails (a unit's start) and is journaled; the controller dies in
    attempt 2's repro (no restore)."""
    bed = two_roles(fail_starts=1)
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1)

    def kill(text: str, argv: object) -> Reply:
        raise Killed

    bed.transports["prefill"].script("fake-repro --trial 0", kill, times=1)
    with monkeypatch.context() as mp:
        mp.setattr(HostGuard, "restore", lambda self, run_dir: [])
        with pytest.raises(Killed):
            runner_for(bed, plan, run_dir, infra_attempts=2).execute()
    return bed, plan


def test_a_controller_killed_during_a_retry_leaves_the_trial_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 1 of trial 0 fails and is journaled; the controller dies in attempt 2's repro.
    Before the `retried` mark, resume read attempt 1's record as the trial's end: the trial
    stayed failed and its retry never ran (before failed attempts were journaled, it ran again)."""
    run_dir, journal = tmp_path / "run", tmp_path / "run" / "journal.jsonl"
    bed, plan = killed_during_a_retry(run_dir, monkeypatch)
    assert [(r.trial, r.attempt, r.status, r.retried) for r in journaled(run_dir)] == [(0, 1, "failed", True)]
    for index in (True, False):  # the status index (a cache) and the lines themselves agree
        if not index:
            (journal.parent / (journal.name + ".idx")).unlink()
        statuses = trial_statuses(journal)
        assert (statuses.finished, statuses.interrupted) == (frozenset(), frozenset({0}))
    inventory = Inventory({plan.testbed.name: plan.testbed}, "inventory.yaml", "")
    save_manifest(run_dir, make_manifest(plan, inventory, "fake-run", "2026-12-05T00:00:00.000Z"))
    assert list(_journaled(run_dir).records()) == []  # nothing for the adaptive or hunt sources to take as a result
    assert _final_counts(run_dir) == (0, 0)  # the outcome counts it neither finished nor failed (was (1, 1))
    resumed = runner_for(bed, plan, run_dir, infra_attempts=2).execute(set(), resume=True)
    assert (resumed.completed, resumed.failed) == (2, 0)
    assert trial_statuses(journal).finished == {0, 1}
    assert _final_counts(run_dir) == (2, 0)


# ---------------------------------------------------------------- attempts across sessions
def _folder(record: TrialRecord) -> str:
    """The trial folder a record links (every record links its units' logs)."""
    (folder,) = {path.split("/logs/")[0] for path in record.logs.values()}
    return folder


def test_a_trial_run_again_after_a_resume_keeps_the_earlier_attempts_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 1 of trial 0 fails (journaled, retried: true), the controller dies in attempt 2.
    Before, the resumed session numbered the trial's attempts from 1 again and wrote into
    trials/0000: the failed attempt's record kept linking that folder, now holding the new
    attempt's logs. Its attempts now continue past the folders there (attempt 2's, cut off,
    stays as it was left)."""
    run_dir = tmp_path / "run"
    bed, plan = killed_during_a_retry(run_dir, monkeypatch)
    (failed,) = journaled(run_dir)
    log = run_dir / failed.logs["decode:decode-server"]
    evidence = log.read_bytes()
    assert b"decode-server: failed" in evidence
    runner_for(bed, plan, run_dir, infra_attempts=2).execute(set(), resume=True)
    records = journaled(run_dir)
    assert [(r.trial, r.attempt, r.status, r.retried) for r in records] == [
        (0, 1, "failed", True),
        (0, 3, "completed", False),  # attempt 2 was cut off: its folder keeps the number
        (1, 1, "completed", False),
    ]
    assert [_folder(r) for r in records] == ["trials/0000", "trials/0000-attempt3", "trials/0001"]
    assert log.read_bytes() == evidence  # the failed attempt's record still shows its own logs
    assert set(failed.logs.values()).isdisjoint(records[1].logs.values())
    assert (run_dir / "trials" / "0000-attempt2").is_dir()


def test_a_deleted_attempt_folders_number_is_not_given_to_the_next_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 1 of trial 0 fails (journaled, retried: true), the controller dies in attempt 2, and
    the trial's folders are deleted (disk space) before `orch resume`. Before, the first free
    folder was trials/0000 again: the new attempt was journaled as attempt 1 too, and the failed
    record's logs link ("unit decode-server failed") showed the new attempt's logs. The resume now
    numbers on past the journal's attempts of the trials it runs again (store.journal.last_attempts)."""
    run_dir = tmp_path / "run"
    bed, plan = killed_during_a_retry(run_dir, monkeypatch)
    for folder in ("0000", "0000-attempt2"):
        shutil.rmtree(run_dir / "trials" / folder)
    journal = run_dir / "journal.jsonl"
    before = last_attempts(journal, trial_statuses(journal).interrupted)
    assert before == {0: 1}
    runner_for(bed, plan, run_dir, infra_attempts=2, attempts_before=before).execute(set(), resume=True)
    records = journaled(run_dir)
    assert [(r.trial, r.attempt, r.status) for r in records] == [
        (0, 1, "failed"),
        (0, 2, "completed"),
        (1, 1, "completed"),
    ]
    assert [_folder(r) for r in records] == ["trials/0000", "trials/0000-attempt2", "trials/0001"]
    assert not (run_dir / "trials" / "0000").exists()  # the failed attempt's folder is not refilled


def test_last_attempts_reads_the_trials_asked_for_in_any_spelling(tmp_path: Path) -> None:
    bed = two_roles(fail_starts=10**6)
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1)
    runner_for(bed, plan, tmp_path / "run", infra_attempts=3).execute()
    journal = tmp_path / "run" / "journal.jsonl"
    assert last_attempts(journal, {0, 1, 7}) == {0: 3, 1: 3}
    assert last_attempts(journal, ()) == {}
    spaced = [json.dumps(json.loads(line)) + "\n" for line in journal.read_text().splitlines()]  # not orch's spelling
    journal.write_text("".join(spaced))
    assert last_attempts(journal, {1}) == {1: 3}


def test_a_trial_interrupted_mid_repro_keeps_its_output_when_resumed(tmp_path: Path) -> None:
    """Ctrl-C during trial 0's repro: no record, and trials/0000/repro.out holds what the repro
    printed before it was killed (the only evidence of that attempt). Before, the resumed trial
    ran as attempt 1 again and truncated it."""
    bed = two_roles()
    plan = make_plan(bed, {"d": flag("decode", "DECODE_FLAG")}, replicates=1)
    run_dir = tmp_path / "run"
    printed = "session 1 ok\nsession 2 CORRUPTION\n"

    def ctrl_c(text: str, argv: object) -> Reply:
        raise CommandInterrupted(Result("prefill", text, -15, printed, "", 0.0))

    bed.transports["prefill"].script("fake-repro --trial 0", ctrl_c, times=1)
    first = runner_for(bed, plan, run_dir).execute()
    assert first.interrupted and journaled(run_dir) == []
    cut_off = run_dir / "trials" / "0000" / "repro.out"
    assert cut_off.read_text() == printed
    resumed = runner_for(bed, plan, run_dir).execute(set(), resume=True)
    assert (resumed.completed, resumed.failed) == (2, 0)
    assert [(r.trial, r.attempt, _folder(r)) for r in journaled(run_dir)] == [
        (0, 2, "trials/0000-attempt2"),
        (1, 1, "trials/0001"),
    ]
    assert cut_off.read_text() == printed
