"""Where the hunt's trial numbering (the first wave under plan.json's numbers) meets the runs
orch wrote before it, resume, and the readers of an unfinished run.

- An older orch numbered a hunt's trials as it handed them out (the failing configuration again
  as trial 1, where plan.json has the clean one), and its report, hunt page and resume read that
  journal: they still do. A hunt journaled by this orch is checked against plan.json like any run
  (RunManifest.hunt_planned_numbers), and a run.json of any other run stays as it was.
- A hunt resumed during its first wave: the journal's next number is below the wave's end, and a
  trial the search asks for again must not take a number a first-wave configuration waits for.
- An unfinished hunt says how far it got in every quote of its result, with no planned total.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.hunt_runs import STAMP, Answer, hunt_run, hunt_trial, run_source, small_hunt, truth_answer

from orchestrator.core.huntplan import first_wave
from orchestrator.core.model import Matrix
from orchestrator.core.records import EventRecord
from orchestrator.errors import ConfigError
from orchestrator.report.build import incomplete_reason
from orchestrator.report.compare import compare
from orchestrator.report.hunt import hunt_report
from orchestrator.report.page import environment
from orchestrator.report.render import load_report
from orchestrator.store.journal import Journal
from orchestrator.store.manifest import load_manifest, save_manifest
from orchestrator.store.rundir import RunDir
from orchestrator.store.runtrials import read_run_rows
from orchestrator.sweep import api
from orchestrator.sweep.hunt import HuntSource
from orchestrator.team.livestatus import StatusFile, snapshot
from orchestrator.team.notify import summarize_run
from orchestrator.team.queue import Claimer
from orchestrator.team.serve import STATUS_TEMPLATE


def _handed_out_journal(run: Path, m: Matrix) -> None:
    """What an older orch journaled for a hunt whose failing configuration showed no failure in
    its first trial: that configuration again as trial 1, the clean one as trial 2."""
    assert m.hunt is not None
    failing, clean = (1 << len(m.hunt.flags)) - 1, 0
    trials = [(failing, 0), (failing, 3), (clean, 0)]
    with Journal(RunDir(run).journal) as journal:
        journal.append(EventRecord(run_id=run.name, event="run_started", at=STAMP))
        for index, (config, k) in enumerate(trials):
            journal.append(hunt_trial(dict(m.hunt.levels(config)), index, k, run_id=run.name))
        journal.append(EventRecord(run_id=run.name, event="run_interrupted", at=STAMP, message="killed"))


def _empty_hunt_run(tmp_path: Path, m: Matrix) -> Path:
    run = tmp_path / "hunt"
    hunt_run(run, m, truth_answer(m), limit=0, status="interrupted")
    RunDir(run).journal.unlink()
    return run


def test_an_older_orchs_hunt_journal_is_read_and_this_orchs_is_checked_against_its_plan(tmp_path: Path) -> None:
    m = small_hunt(tmp_path)
    run = _empty_hunt_run(tmp_path, m)
    assert json.loads(RunDir(run).run_json.read_text())["hunt_planned_numbers"] is True  # this orch's hunt
    _handed_out_journal(run, m)
    with pytest.raises(ConfigError, match="trial 1 is cell .* in the plan") as caught:
        load_report(run)
    assert "delete" not in str(caught.value)

    older = load_manifest(run).model_copy(update={"hunt_planned_numbers": False})
    save_manifest(run, older)  # run.json as an older orch wrote it: no such field
    assert "hunt_planned_numbers" not in json.loads(RunDir(run).run_json.read_text())
    assert load_report(run).completed == 3
    assert hunt_report(run) is not None
    assert [r.trial for r in api._journaled(run).records()] == [0, 1, 2]  # resume replays it too


def test_a_run_json_of_a_run_that_is_not_a_hunt_keeps_its_fields(tmp_path: Path) -> None:
    """An older orch (a teammate's) reads this orch's run.json of an ordinary run: no new field in it."""
    from helpers.report_synth import synthetic_run

    manifest, _ = synthetic_run(replicates=1)
    save_manifest(tmp_path, manifest)
    text = RunDir(tmp_path).run_json.read_text()
    assert "hunt_planned_numbers" not in text and load_manifest(tmp_path).checks_planned_cells


def _answer_with_a_failed_clean_trial(m: Matrix) -> Answer:
    """The DSV4 AND; the clean configuration's first trial fails, so the search asks for it again."""
    return truth_answer(m, fail=lambda step, handed: step.trial.cell.id.count("=off") == 4 and not handed)


def test_a_hunt_resumed_during_its_first_wave_takes_no_planned_number_for_another_trial(tmp_path: Path) -> None:
    """Killed after trial 1 (the clean configuration's, which failed): the journal's next number is
    2, plan.json's trial 2 is the first single-flag drop. The clean configuration, asked for again,
    must take a number past the wave, and the drop its planned 2: the journal stays one the
    report reads (no trial number twice, each planned trial its planned cell)."""
    m = small_hunt(tmp_path)
    assert m.hunt is not None
    run = _empty_hunt_run(tmp_path, m)
    answer, handed = _answer_with_a_failed_clean_trial(m), dict[str, int]()
    with Journal(RunDir(run).journal) as journal:
        journal.append(EventRecord(run_id="hunt", event="run_started", at=STAMP))
        first = run_source(HuntSource(m), journal, "hunt", answer, handed, limit=2)
        journal.append(EventRecord(run_id="hunt", event="run_interrupted", at=STAMP, message="killed"))
    assert [(r.trial, r.status) for r in first] == [(0, "completed"), (1, "failed")]

    resumed = api._journaled(run)
    assert resumed.next_trial == 2
    source = api._design(SimpleNamespace(matrix=m), set(), resumed)(None)  # type: ignore[arg-type]
    assert isinstance(source, HuntSource)
    with Journal(RunDir(run).journal) as journal:
        journal.append(EventRecord(run_id="hunt", event="run_resumed", at=STAMP))
        rest = run_source(source, journal, "hunt", answer, handed, limit=200)
    numbers = [r.trial for r in first + rest]
    assert len(numbers) == len(set(numbers)), numbers  # no number handed out twice
    wave = first_wave(m.hunt)
    clean_again = next(r for r in rest if m.hunt.config_of(r.levels) == 0)
    assert clean_again.trial >= len(wave), numbers
    assert len(read_run_rows(run, load_manifest(run)).rows) == len(numbers)  # checked against plan.json


def test_an_unfinished_hunt_says_how_far_it_got_before_its_verdict_with_no_planned_total(tmp_path: Path) -> None:
    m = small_hunt(tmp_path)
    run = tmp_path / "hunt"
    hunt_run(run, m, truth_answer(m), limit=8, status="interrupted")
    report = hunt_report(run)
    assert report is not None
    summary = summarize_run(run)  # the webhook; the index and summary.json quote the same sentence
    assert summary.headline.startswith(
        "The run is interrupted: 8 trials completed (a hunt decides its trials as it goes); "
        "conclusions cover only those (`orch resume` continues it). So far: hunt "
    ), summary.headline
    assert "planned" not in summary.headline.replace("a hunt decides", "")
    manifest = load_manifest(run)
    rows = read_run_rows(run, manifest).rows
    reason = incomplete_reason(manifest, rows)  # orch compare's warning
    assert reason == "interrupted, 8 trials completed (a hunt decides its trials as it goes)", reason
    (warning,) = compare(manifest, rows, manifest, rows).warnings[:1]
    assert warning.startswith(f"Run hunt (A) is incomplete: {reason}. Its search stopped before its answer"), warning
    assert "than planned" not in warning


def test_the_status_page_shows_a_stale_hunts_trials_done_and_its_dead_controller(tmp_path: Path) -> None:
    m = small_hunt(tmp_path)
    reports = tmp_path / "reports"
    run = reports / "hunt"
    hunt_run(run, m, truth_answer(m), limit=14, status="running")
    me = Claimer.current()
    status = StatusFile(
        run_id="hunt",
        name="small_hunt",
        testbed="local-sim",
        host=me.host,
        pid=me.pid,
        pid_start=me.start + 1,  # the pid was reused: its controller is gone
        state="running",
        started=STAMP,
        updated=STAMP,
        done=14,
        total=None,
        failed=0,
    )
    RunDir(run).status_json.write_text(status.model_dump_json())
    page = environment().get_template(STATUS_TEMPLATE).render(s=snapshot(reports), refresh=5, csp="")
    assert 'badge stale">stale' in page and "its controller is gone" in page
    assert "14 done" in page and "<progress" not in page
