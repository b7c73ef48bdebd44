"""The records of a run (store.runtrials): one rule for which record stands for each trial, shared
by the report, export and compare, and what is damage (a ConfigError at journal.jsonl:<line>)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pydantic
import pytest
from helpers.report_synth import synthetic_run, write_run

from orchestrator.cli.main import main
from orchestrator.core.records import EventRecord, Failure, RunManifest, TrialRecord
from orchestrator.errors import ConfigError
from orchestrator.report import export
from orchestrator.report.compare import compare
from orchestrator.report.render import load_report
from orchestrator.store import journal as journal_mod
from orchestrator.store.journal import trial_statuses
from orchestrator.store.manifest import load_manifest
from orchestrator.store.runtrials import read_run_rows, trial_rows


def _journal(run_dir: Path, manifest: RunManifest, lines: list[TrialRecord | EventRecord]) -> Path:
    """run.json, and a journal of exactly these lines (line 1 is lines[0])."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(manifest.model_dump_json(indent=2))
    (run_dir / "journal.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in lines))
    return run_dir


def _event(manifest: RunManifest, name: str) -> EventRecord:
    return EventRecord(run_id=manifest.run_id, event=name, at=manifest.started)  # type: ignore[arg-type]


def _attempt(record: TrialRecord, attempt: int, status: str = "failed") -> TrialRecord:
    kind = "interrupted" if status == "interrupted" else "infrastructure"
    failure = Failure(kind=kind, error="HealthTimeout", message=f"attempt {attempt}")  # type: ignore[arg-type]
    return record.model_copy(update={"attempt": attempt, "status": status, "failure": failure, "metrics": {}})


def _damaged(tmp_path: Path, damage: str) -> tuple[Path, int]:
    """A one-replicate synthetic run (8 planned trials) with one damaged line; (run, its line)."""
    manifest, records = synthetic_run(replicates=1, failures=False)
    first = records[0]
    bad = {
        "duplicate": first,
        "past the plan": first.model_copy(update={"trial": len(manifest.plan)}),
        "negative": first.model_copy(update={"trial": -1}),
        "another cell": first.model_copy(update={"cell": records[1].cell, "levels": records[1].levels}),
        "another cell's levels": first.model_copy(update={"levels": records[1].levels}),
        "another cell's name": first.model_copy(update={"cell": records[1].cell}),
        "failed after completed": _attempt(first, 2),
    }[damage]
    lines = [_event(manifest, "run_started"), *records, bad, _event(manifest, "run_finished")]
    return _journal(tmp_path / "run", manifest, lines), len(records) + 2


DAMAGE = {
    "duplicate": "trial 0 attempt 1 finished twice (also line 2)",
    "past the plan": "trial 8 is not in the plan (it has 8 trials, from 0)",
    "negative": "trial -1 is not in the plan",
    "another cell": "in the plan",
    "another cell's levels": "in the plan",
    "another cell's name": "in the plan",
    "failed after completed": "trial 0 has a failed record after its completed one (line 2)",
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damage_is_refused_at_its_line(tmp_path: Path, damage: str) -> None:
    run, line = _damaged(tmp_path, damage)
    with pytest.raises(ConfigError) as caught:
        read_run_rows(run, load_manifest(run))
    assert caught.value.line == line and str(caught.value).startswith(f"{run / 'journal.jsonl'}:{line}: ")
    assert DAMAGE[damage] in str(caught.value)


def test_a_run_that_never_wrote_a_journal_has_no_rows(tmp_path: Path) -> None:
    manifest, _ = synthetic_run(replicates=1, failures=False)
    run = _journal(tmp_path / "run", manifest, [])
    (run / "journal.jsonl").unlink()
    scan = read_run_rows(run, load_manifest(run))
    assert (scan.rows, scan.torn_tail) == ([], False)


def test_the_rule_is_not_applied_without_the_plan_it_checks_against(tmp_path: Path) -> None:
    """A caller that loaded run.json without its plan would check nothing: refused, not passed."""
    manifest, records = synthetic_run(replicates=1, failures=False)
    manifest = manifest.model_copy(update={"plan_trials": len(manifest.plan)})
    run = _journal(tmp_path / "run", manifest, list(records))
    assert len(read_run_rows(run, load_manifest(run)).rows) == len(records)
    with pytest.raises(ValueError, match="needs the manifest's plan"):
        read_run_rows(run, load_manifest(run).model_copy(update={"plan": []}))


@pytest.mark.parametrize("command", ["report", "export", "compare"])
def test_report_export_and_compare_all_refuse_a_duplicated_line(tmp_path: Path, capsys, command: str) -> None:
    """A duplicated line counted twice in compare, was exported once and reported once: now all
    three refuse it, exit 2, naming the line, and write nothing."""
    run, line = _damaged(tmp_path, "duplicate")
    manifest, records = synthetic_run(replicates=1, failures=False, run_id="clean")
    clean = write_run(tmp_path / "clean", manifest, records)
    args = {
        "report": ["report", str(run)],
        "export": ["export", str(run)],
        "compare": ["compare", str(clean), str(run)],
    }
    assert main(args[command]) == 2
    err = capsys.readouterr().err
    assert f"journal.jsonl:{line}: trial 0 attempt 1 finished twice" in err and "Traceback" not in err
    assert not (run / "index.html").exists() and not list(run.glob("*.csv")) and not list(tmp_path.glob("*.html"))


def test_the_rule_stops_at_the_first_damaged_line_before_reading_on(tmp_path: Path) -> None:
    """A million duplicated lines are refused at the first duplicate, not after holding them all:
    a broken line further on is never reached."""
    run, line = _damaged(tmp_path, "duplicate")
    with open(run / "journal.jsonl", "ab") as handle:
        end = _event(load_manifest(run), "run_finished").model_dump_json()
        handle.write(b'{"type": "trial", "broken\n' + end.encode() + b"\n")
    with pytest.raises(ConfigError) as caught:
        load_report(run)
    assert caught.value.line == line


@pytest.mark.parametrize("resumed", [(1, 2), (4, 5)], ids=["numbered-from-1-again", "numbered-on"])
def test_retries_and_a_resume_are_not_damage_and_every_reader_agrees(tmp_path: Path, resumed: tuple[int, int]) -> None:
    """Trial 0: failed attempts journaled before each retry, an interrupted one, then after `orch
    resume` two attempts more, the second completed: numbered from 1 again (journals written
    before store.attempts) or on past the earlier ones (since). Its data is that completed record
    for the report, export (one row per trial and metric) and compare alike."""
    manifest, records = synthetic_run(replicates=1, failures=False)
    first, rest = records[0], records[1:]
    done = first.model_copy(update={"attempt": resumed[1]})
    lines = [
        _event(manifest, "run_started"),
        _attempt(first, 1),
        _attempt(first, 2),
        _attempt(first, 3, "interrupted"),
        _event(manifest, "run_interrupted"),
        _event(manifest, "run_resumed"),
        _attempt(first, resumed[0]),
        done,
        *rest,
        _event(manifest, "run_finished"),
    ]
    run = _journal(tmp_path / "run", manifest, lines)
    report = load_report(run)
    assert report.completed == len(records) and report.failed == 4
    cell = next(c for c in report.cells if c.cell == first.cell)
    assert cell.proportions["corruption"].rate.k == done.metrics["corruption"].k

    assert main(["export", str(run), "--format", "csv"]) == 0
    frame = pd.read_csv(run / f"{manifest.run_id}.csv")
    mine = frame[frame.trial == 0]
    assert set(mine.attempt) == {resumed[1]} and set(mine.status) == {"completed"} and len(mine) == len(done.metrics)
    assert len(frame) == len(records) * len(done.metrics)

    rows = read_run_rows(run, load_manifest(run)).rows
    side = {r.cell: r.a for r in compare(manifest, rows, manifest, rows).rows if r.metric == "corruption"}
    assert (side[first.cell].trials, side[first.cell].k) == (1, done.metrics["corruption"].k)


def test_the_same_attempt_twice_is_damage_only_within_one_session(tmp_path: Path) -> None:
    manifest, records = synthetic_run(replicates=1, failures=False)
    failed = _attempt(records[0], 1)
    twice = [_event(manifest, "run_started"), failed, failed]
    with pytest.raises(ConfigError, match="attempt 1 finished twice"):
        read_run_rows(_journal(tmp_path / "a", manifest, twice), manifest)
    done = records[0].model_copy(update={"attempt": 2})
    resumed = [_event(manifest, "run_started"), failed, _event(manifest, "run_resumed"), failed, done, *records[1:]]
    assert len(read_run_rows(_journal(tmp_path / "b", manifest, resumed), manifest).rows) == len(records) + 2


def test_a_hunt_journals_trials_past_its_first_wave(tmp_path: Path) -> None:
    manifest, records = synthetic_run(replicates=1, failures=False)
    beyond = records[3].model_copy(update={"trial": len(manifest.plan) + 5})
    lines = [_event(manifest, "run_started"), *records, beyond]
    hunt = manifest.model_copy(update={"hunt": True})
    assert len(read_run_rows(_journal(tmp_path / "hunt", hunt, lines), hunt).rows) == len(records) + 1
    with pytest.raises(ConfigError, match="not in the plan"):
        read_run_rows(_journal(tmp_path / "run", manifest, lines), manifest)
    # A hunt numbers its trials as the search hands them out (the failing configuration again until
    # it fails often enough, the wave in another order on N testbeds): its trial 3 may be another
    # configuration than plan.json's trial 3 (this refused the report of hunts orch ran itself).
    # In any other run that line is damage.
    moved = records[3].model_copy(update={"cell": records[4].cell, "levels": records[4].levels})
    assert len(read_run_rows(_journal(tmp_path / "moved", hunt, [*records[:3], moved]), hunt).rows) == 4
    with pytest.raises(ConfigError, match="in the plan"):
        read_run_rows(_journal(tmp_path / "moved-run", manifest, [*records[:3], moved]), manifest)


def test_a_run_json_from_before_the_hunt_field_says_so_by_its_matrix(tmp_path: Path) -> None:
    manifest, _ = synthetic_run(replicates=1)
    data = json.loads(manifest.model_dump_json())
    del data["hunt"]
    assert RunManifest.model_validate(data).hunt is False
    data["matrix_text"] += "hunt:\n  metric: corruption\n"
    assert RunManifest.model_validate(data).hunt is True


def test_compare_counts_a_duplicated_record_once() -> None:
    manifest, records = synthetic_run(replicates=2, failures=False)
    once = compare(manifest, records, manifest, records)
    twice = compare(manifest, [*records, *records], manifest, records)
    assert [(r.a.trials, r.a.k, r.a.n) for r in twice.rows] == [(r.a.trials, r.a.k, r.a.n) for r in once.rows]


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_an_export_written_in_chunks_is_the_table_written_whole(tmp_path: Path, monkeypatch, fmt: str) -> None:
    manifest, records = synthetic_run(replicates=2)
    run = write_run(tmp_path / "run", manifest, records)
    monkeypatch.setattr(export, "EXPORT_CHUNK", 3)
    chosen = {r.trial: r for r in records}  # the synthetic run's retries end completed
    whole = export.export_bytes(export.tidy(manifest, [chosen[i] for i in sorted(chosen)]), fmt)  # type: ignore[arg-type]
    assert export.export_run(run, fmt).read_bytes() == whole  # type: ignore[arg-type]


class _RefusingOdd:
    """A fast reader's schema that refuses the line marked odd, as pydantic-core refuses some JSON
    json.loads takes (a lone surrogate escape did, before core.jsontext refused it everywhere):
    that line alone is read by the full parser."""

    def __init__(self, adapter: pydantic.TypeAdapter[Any]) -> None:
        self.adapter = adapter

    def validate_json(self, line: bytes) -> Any:
        if ODD in line:
            raise pydantic.ValidationError.from_exception_data("odd", [])
        return self.adapter.validate_json(line)


ODD = b"odd line"


def test_a_trial_left_by_a_controller_killed_during_its_retry_is_unfinished_for_every_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trial 7's attempt 1 failed and was journaled `retried`; the controller died in attempt 2.
    Resume counts the trial unfinished and runs it again; export gave it a row, status failed, as
    if it had ended so. Now it has no record standing for it (the report still lists the attempt
    among its failed attempts), whether the row was read fast or by the full parser."""
    manifest, records = synthetic_run(replicates=1, failures=False)
    *done, last = records
    retried = _attempt(last, 1).model_copy(update={"retried": True})
    run = _journal(tmp_path / "run", manifest, [_event(manifest, "run_started"), *done, retried])
    odd = json.loads(retried.model_dump_json())
    odd["repro"]["stdout_tail"] = ODD.decode()  # the fast readers refuse it: the full parser reads it
    for name in ("_ROW", "_HEAD"):
        monkeypatch.setattr(journal_mod, name, _RefusingOdd(getattr(journal_mod, name)))
    full = journal_mod._parse_line
    parsed: list[bytes] = []  # the lines the full parser read
    monkeypatch.setattr(journal_mod, "_parse_line", lambda *a: (parsed.append(a[2]), full(*a))[1])
    copy = _journal(tmp_path / "copy", manifest, [_event(manifest, "run_started"), *done])
    with open(copy / "journal.jsonl", "a") as handle:
        handle.write(json.dumps(odd) + "\n")
    for each in (run, copy):
        rows = read_run_rows(each, manifest).rows
        assert rows[-1].retried and not any(r.retried for r in rows[:-1])
        assert [r.trial for r in trial_rows(rows)] == [r.trial for r in done]
        assert trial_statuses(each / "journal.jsonl").interrupted == {last.trial}
    assert any(ODD in line for line in parsed)  # the copy's retried line was read by the full parser
    report = load_report(run)
    assert (report.completed, report.failed) == (len(done), 1)
    assert main(["export", str(run), "--format", "csv"]) == 0
    frame = pd.read_csv(run / f"{manifest.run_id}.csv")
    assert last.trial not in set(frame.trial) and set(frame.status) == {"completed"}
