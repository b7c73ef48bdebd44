"""The journal's session events, as a run and its resume write them (on the fakes, no process):
run_started, then run_interrupted with what stopped it, then run_resumed. What hangs on them: the
journal's `stopped` (a run_interrupted event since the controller last started), which the report,
`orch compare` and the hunt's section read as "this run was stopped", and the session count a
retried trial's attempts are numbered within.

Found by mutation testing of runner._sweep: dropping either event passed every test of the
runner, the journal and the report that was run against it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.parallel_fakes import interrupted_sweep

from orchestrator.core.records import EventRecord
from orchestrator.store.journal import read_journal, read_trial_rows
from orchestrator.sweep import api
from orchestrator.sweep.progress import QuietProgress


def _events(journal: Path) -> list[tuple[str, str]]:
    return [(r.event, r.message) for r in read_journal(journal).records if isinstance(r, EventRecord)]


def test_an_interrupted_run_and_its_resume_leave_their_session_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, outcome, _ = interrupted_sweep(tmp_path, monkeypatch, "events")
    assert outcome.run_dir is not None
    journal = outcome.run_dir / "journal.jsonl"
    sessions = [(e, m) for e, m in _events(journal) if e in ("run_started", "run_interrupted", "run_resumed")]
    assert sessions == [("run_started", ""), ("run_interrupted", "interrupted by Ctrl-C (SIGINT)")]
    assert read_trial_rows(journal).stopped, "stopped since it last started"

    api.resume(api.ResumeRequest(outcome.run_dir), lambda started: QuietProgress(), warn=lambda message: None)
    assert [e for e, _ in _events(journal)].count("run_resumed") == 1
    assert not read_trial_rows(journal).stopped, "the resume started it again and ran to its end"
