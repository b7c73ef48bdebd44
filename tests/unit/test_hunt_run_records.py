"""A hunt's journal against its plan.json (store.runtrials' rule): plan.json holds the first wave
as trials 0..N, and a configuration the hunt asks for again - the failing one until it shows its
failures, one whose trial failed - must not take another configuration's planned number. It
did: trials were numbered in the order they were handed out, and the report, the runs index and
`orch report` refused the journal orch had written as damaged (audit 2026-12-05)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.hunt_runs import hunt_run, small_hunt, truth_answer

from orchestrator.core.huntplan import first_wave
from orchestrator.errors import ConfigError
from orchestrator.report.render import load_report
from orchestrator.store.manifest import load_manifest
from orchestrator.store.runtrials import read_run_rows


def test_a_hunt_whose_first_wave_has_a_failed_trial_keeps_a_journal_its_report_reads(tmp_path: Path) -> None:
    """The audit's reproduction: the clean endpoint's trial fails; the hunt asks for it again."""
    m = small_hunt(tmp_path)
    clean_fails_once = truth_answer(m, fail=lambda step, handed: step.trial.cell.id.count("=off") == 4 and not handed)
    records = hunt_run(tmp_path / "run", m, clean_fails_once)
    assert [r.status for r in records].count("failed") == 1
    run = tmp_path / "run"
    assert len(read_run_rows(run, load_manifest(run)).rows) == len(records)  # not refused as damage
    assert load_report(run).completed == len(records) - 1


def test_a_failing_configuration_asked_again_takes_a_number_past_the_first_wave(tmp_path: Path) -> None:
    """No failure at all: the failing configuration shows 1 failure in its first trial (under
    min_failures 2; ~15% of DSV4 hunts at 20 sessions a trial) and is asked for again first."""
    m = small_hunt(tmp_path)
    assert m.hunt is not None
    wave = first_wave(m.hunt)
    truth = truth_answer(m)

    def one_failure_first(step, handed):  # type: ignore[no-untyped-def]
        return ("completed", 1) if step.trial.is_baseline and not handed else truth(step, handed)

    records = hunt_run(tmp_path / "run", m, one_failure_first)
    assert records[1].is_baseline and records[1].trial == len(wave)  # asked again, numbered past the wave
    planned = {p.trial: p.cell for p in load_manifest(tmp_path / "run").plan}
    assert all(r.cell == planned[r.trial] for r in records if r.trial < len(wave))
    assert sorted(r.trial for r in records) == list(range(len(records)))  # no number skipped or taken twice
    load_report(tmp_path / "run")


def test_a_hunt_trial_in_another_configurations_planned_place_is_still_damage(tmp_path: Path) -> None:
    """The rule is not weakened for hunts: a planned trial must still hold the plan's cell."""
    m = small_hunt(tmp_path)
    hunt_run(tmp_path / "run", m, truth_answer(m), limit=4)
    journal = tmp_path / "run" / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace('"trial":1,', '"trial":2,').replace('"trial": 1,', '"trial": 2,')
    lines[3] = lines[3].replace('"trial":2,', '"trial":1,').replace('"trial": 2,', '"trial": 1,')
    journal.write_text("".join(lines))
    (tmp_path / "run" / "journal.jsonl.idx").unlink(missing_ok=True)
    with pytest.raises(ConfigError, match="in the plan") as caught:
        read_run_rows(tmp_path / "run", load_manifest(tmp_path / "run"))
    assert "delete" not in str(caught.value)  # a hint never invites deleting a trial's data
