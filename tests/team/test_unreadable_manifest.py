"""A run folder whose run.json cannot be read (missing, over its cap, torn, another schema, not a
file) is listed by every status view (`orch status`, /status, /api/status) with the reason, as the
runs index lists it, in the same words; it was left out, so a sweep whose run.json was damaged
vanished from `orch status`. A folder holding no run's file (a user's notes/) stays out, and a
run whose run.json reads but that has no status file stays out as before."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers.status_runs import DEAD_PID, ME, fake_dead, run, settled_cache, status

from orchestrator.cli.main import main
from orchestrator.report.page import environment
from orchestrator.report.render import fresh_summary
from orchestrator.report.site import EntryCache, run_entries
from orchestrator.store.atomic import write_json_atomic
from orchestrator.store.manifest import load_manifest, save_manifest
from orchestrator.team.livestatus import live_runs, snapshot
from orchestrator.team.serve import STATUS_TEMPLATE, runs_json, status_json

TORN = '{\n  "run_id": "x",\n  "name": '  # a run.json cut off while written (by hand or a full disk)
RUNNING = "20260601-running-torn"


@pytest.fixture
def dead(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    return fake_dead(monkeypatch)


def damaged(reports: Path) -> dict[str, str]:
    """Run folders with a run.json that cannot be read, each with the reason the views must give,
    beside a whole running run, a whole run without a status file and a folder that is no run."""
    run(reports, "20260601-whole", "running", status("w", "running"))
    run(reports, "20260602-no-status", "completed", None)  # reads: left out, as before
    (reports / "notes").mkdir()
    (reports / "notes" / "todo.txt").write_text("not a run")
    run(reports, RUNNING, "running", status("rt", "running", done=3, total=9))
    (reports / RUNNING / "run.json").write_text(TORN)
    gone = run(reports, "20260603-missing", "running", status("m", "running", pid=DEAD_PID))
    (gone / "run.json").unlink()
    journal_only = reports / "20260604-journal-only"
    journal_only.mkdir()
    (journal_only / "journal.jsonl").write_text("")
    huge = run(reports, "20260605-huge", "completed", None)
    with open(huge / "run.json", "r+b") as f:
        f.truncate(128 * 1024 * 1024 + 1)  # sparse: never read (a stat says its size)
    other = run(reports, "20260606-other-schema", "completed", status("o"))
    (other / "run.json").write_text(json.dumps({"schema_version": 9, "run_id": 3}))
    fifo = run(reports, "20260607-fifo", "completed", None)
    (fifo / "run.json").unlink()
    os.mkfifo(fifo / "run.json")  # opened, a FIFO blocks until a writer comes: stat only
    return {
        RUNNING: "not JSON at line 3 (EOF while parsing a value, column 10)",
        "20260603-missing": "missing",
        "20260604-journal-only": "missing",
        "20260605-huge": "over 128 MiB",
        "20260606-other-schema": "not an orch run manifest (17 errors, first: run_id: Input should be a valid "
        "string; another orch version's?)",  # its run_id wrong, 16 fields missing
        "20260607-fifo": "not a regular file (a FIFO)",
    }


def test_a_run_json_that_cannot_be_read_is_listed_with_why(tmp_path: Path, dead: set[int]) -> None:
    """Each damaged folder listed as unreadable with its reason (they were left out); notes/ and
    the run without a status file are not; a running run whose run.json is torn keeps what its
    status file says (names, progress, controller)."""
    reports = tmp_path / "reports"
    expected = damaged(reports)
    runs = {r.directory: r for r in live_runs(reports)}
    assert {d: r.unreadable for d, r in runs.items() if r.state == "unreadable"} == expected
    assert all(runs[d].unreadable_file == "run.json" for d in expected)
    assert sorted(set(runs) - set(expected)) == ["20260601-whole"]  # not notes/, not the one without status
    torn = runs[RUNNING]
    assert torn.unreadable_line == f"run.json unreadable: {expected[RUNNING]}"
    assert (torn.status.name, torn.status.done, torn.status.total) == ("name-rt", 3, 9)
    assert torn.controller == f"{ME.host}:{ME.pid}" and torn.run_status == ""
    assert runs["20260604-journal-only"].controller == "" and runs["20260604-journal-only"].status.name == (
        "20260604-journal-only"
    )


def test_every_status_view_shows_the_word(tmp_path: Path, dead: set[int], capsys: pytest.CaptureFixture[str]) -> None:
    """/api/status (and `orch status --json`), /status and `orch status` each name the file and why."""
    reports = tmp_path / "reports"
    expected = damaged(reports)
    snap = snapshot(reports)
    api = {r["directory"]: r for r in status_json(snap)["runs"]}  # type: ignore[attr-defined]
    assert {d: (api[d]["state"], api[d]["unreadable_file"], api[d]["unreadable"]) for d in expected} == {
        d: ("unreadable", "run.json", why) for d, why in expected.items()
    }
    assert api[RUNNING]["done"] == 3 and api[RUNNING]["pid"] == ME.pid  # its status file's
    page = environment().get_template(STATUS_TEMPLATE).render(s=snap, refresh=5, csp="")
    assert page.count("run.json unreadable: ") == len(expected) and "run.json unreadable: over 128 MiB" in page
    assert main(["status", "--reports", str(reports)]) == 0
    out = capsys.readouterr().out
    assert f"{RUNNING}: run.json unreadable: not JSON at line 3" in out
    assert "20260604-journal-only: run.json unreadable: missing" in out and "notes" not in out


def test_cached_views_equal_uncached_ones_as_run_json_is_damaged_and_repaired(tmp_path: Path, dead: set[int]) -> None:
    """The server's StatusCache (kept by the files' stamps) answers as a fresh view after each
    change: a running run's run.json torn, repaired, removed; a journal appearing in notes/ (it
    becomes a run's folder), a status file appearing beside a run.json that reads."""
    reports = tmp_path / "reports"
    damaged(reports)
    whole = reports / "20260601-whole"
    manifest = load_manifest(whole, plan=False)
    cache = settled_cache()
    changes = [
        lambda: None,
        lambda: (whole / "run.json").write_text(TORN),
        lambda: save_manifest(whole, manifest),
        lambda: (whole / "run.json").unlink(),
        lambda: (reports / "notes" / "journal.jsonl").write_text(""),
        lambda: write_json_atomic(reports / "20260602-no-status" / "status.json", status("ns")),
        lambda: shutil.rmtree(reports / "20260604-journal-only"),
    ]
    seen = []
    for change in changes:
        change()
        cached = live_runs(reports, finished=1000, cache=cache)
        assert cached == live_runs(reports, finished=1000)
        seen.append({r.directory: r.unreadable for r in cached})
    assert seen[1]["20260601-whole"].startswith("not JSON at line 3") and seen[2]["20260601-whole"] == ""
    assert seen[3]["20260601-whole"] == "missing" and seen[4]["notes"] == "missing"
    assert seen[5]["20260602-no-status"] == "" and "20260604-journal-only" not in seen[6]


def test_the_runs_index_lists_the_same_folders_in_the_same_words(tmp_path: Path, dead: set[int]) -> None:
    """The index and /api/runs list every damaged folder the status views list (the one with only
    a journal was left out of them), with `run.json unreadable: WHY`, cached as uncached."""
    reports = tmp_path / "reports"
    expected = damaged(reports)
    entries = run_entries(reports, fresh_summary)
    assert entries == run_entries(reports, fresh_summary, EntryCache())
    errors = {e.directory: e.error for e in entries if e.status == "unreadable"}
    assert errors == {d: f"run.json unreadable: {why}" for d, why in expected.items()}
    assert "notes" not in {e.directory for e in entries}
    api = {r["directory"]: r for r in runs_json(reports)}
    assert api["20260604-journal-only"]["error"] == "run.json unreadable: missing"
    # nothing is known of its plan: no "of at most" (an adaptive run's word), no counts but zeros
    unreadable = [e for e in entries if e.status == "unreadable"]
    assert unreadable and all((e.completed, e.planned, e.failed, e.at_most) == (0, 0, 0, False) for e in unreadable)
