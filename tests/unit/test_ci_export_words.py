"""What the JUnit and Bencher files, and `orch export`'s warnings, say of a run (report.ciexport),
beyond the counts tests/test_gates.py checks. The sixteenth mutation round: a gateless JUnit
file's note, its XML declaration, a cell without data in the Bencher file, and the wording and
cut of the note on estimates that rest on part of a cell's trials were all free to change."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers.report_synth import ALL_OFF, cell_id, synthetic_run, write_run

from orchestrator.core.gates import Gate
from orchestrator.core.records import Failure, TrialRecord
from orchestrator.errors import UsageError
from orchestrator.report import ciexport
from orchestrator.report.build import build_report
from orchestrator.report.ciexport import NO_GATES, bencher_measures, export_ci, junit_xml, partial_note
from orchestrator.report.gates import check_gates

GATE = Gate(name="low corruption", metric="corruption", upper=0.5)


def _lost(records: list[TrialRecord], cells: set[str]) -> list[TrialRecord]:
    """The first completed trial of each of `cells` failed for good instead (no metric)."""
    out, done = [], set()
    failure = Failure(kind="workload", error="WorkloadError", message="repro exited with code 1")
    for r in records:
        if r.cell in cells and r.cell not in done and r.status == "completed":
            done.add(r.cell)
            out.append(r.model_copy(update={"status": "failed", "metrics": {}, "failure": failure}))
        else:
            out.append(r)
    return out


def _properties(xml: bytes) -> dict[str, str]:
    suite = ET.fromstring(xml)
    return {p.get("name", ""): p.get("value", "") for p in suite.iter("property")}


def test_a_gateless_junit_file_says_so_and_a_gated_one_does_not() -> None:
    manifest, records = synthetic_run(failures=False)
    bare = build_report(manifest, records)
    xml = junit_xml(bare, check_gates(bare))
    assert xml.startswith(b"<?xml version='1.0' encoding='utf-8'?>")
    assert _properties(xml) == {"run_id": manifest.run_id, "status": "completed", "note": NO_GATES}
    gated = build_report(manifest.model_copy(update={"gates": [GATE]}), records)
    assert "note" not in _properties(junit_xml(gated, check_gates(gated)))


def test_export_warns_of_a_gateless_junit_file_only(tmp_path: Path) -> None:
    manifest, records = synthetic_run(failures=False)
    run_dir = write_run(tmp_path / manifest.run_id, manifest, records)
    said: list[str] = []
    export_ci(run_dir, "junit", warn=said.append)
    assert said == [f"{NO_GATES}: the JUnit file has no test case, so a CI job reading it has nothing to fail on"]
    said.clear()
    export_ci(run_dir, "bencher", warn=said.append)
    assert not any(NO_GATES in s for s in said)


def test_a_cell_without_data_is_left_out_of_the_bencher_file_never_written_as_null() -> None:
    manifest, records = synthetic_run(replicates=1, failures=False)
    gone = cell_id(ALL_OFF)
    records = _lost(records, {gone})  # its only trial: no value of any metric
    measures = bencher_measures(build_report(manifest, records))
    assert gone not in measures and len(measures) == 7
    assert all(v is not None for cell in measures.values() for m in cell.values() for v in m.values())


def test_the_partial_note_counts_estimates_and_cells_in_words_and_says_nothing_of_a_whole_run() -> None:
    manifest, records = synthetic_run(replicates=3, failures=False)
    whole = build_report(manifest, records)
    assert partial_note(whole, bencher_measures(whole)) is None
    report = build_report(manifest, _lost(records, {cell_id(ALL_OFF)}))
    note = partial_note(report, bencher_measures(report))
    assert note == (
        f"3 estimates of 1 cell rest on part of the cell's finished trials ({cell_id(ALL_OFF)}: 1 of 3 without data): "
        "the Bencher file cannot mark them; the report does, and a gate on them fails"
    )

    one = next(r for r in records if r.cell == cell_id(ALL_OFF))
    no_wall = [
        r.model_copy(update={"metrics": {k: v for k, v in r.metrics.items() if k != "wall"}}) if r is one else r
        for r in records
    ]
    single = build_report(manifest, no_wall)
    assert (partial_note(single, bencher_measures(single)) or "").startswith(
        "1 estimate of 1 cell rests on part of the cell's finished trials"
    )


def test_the_partial_note_names_its_first_cells_and_counts_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    manifest, records = synthetic_run(replicates=3, failures=False)
    cells = sorted({r.cell for r in records})
    report = build_report(manifest, _lost(records, set(cells)))
    note = partial_note(report, bencher_measures(report))
    assert note is not None
    assert note.startswith("24 estimates of 8 cells rest on part")
    named = note[note.index("(") + 1 : note.index("):")]
    assert named.count(": 1 of 3 without data") == ciexport.PARTIAL_SHOWN == 5
    assert named.endswith("; and 3 more cells")
    monkeypatch.setattr(ciexport, "PARTIAL_SHOWN", 8)
    every = partial_note(report, bencher_measures(report))
    assert every is not None and "more cell" not in every


def test_a_ci_exports_output_is_checked_before_the_run_is_read(tmp_path: Path) -> None:
    """`orch export --format junit|bencher -o` has no other check of its output: a folder named as
    the file is the usage error that says so, even for a run folder that holds nothing."""
    folder = tmp_path / "out"
    folder.mkdir()
    for fmt in ("junit", "bencher"):
        with pytest.raises(UsageError, match=r"--output .*out: is a folder"):
            export_ci(tmp_path / "no-such-run", fmt, out=folder)  # type: ignore[arg-type]


def test_a_run_not_ended_is_said_when_someone_listens_and_exported_all_the_same(tmp_path: Path) -> None:
    manifest, records = synthetic_run(failures=False, status="running")
    run_dir = write_run(tmp_path / manifest.run_id, manifest, records, end_events=())
    for fmt in ("junit", "bencher"):
        assert export_ci(run_dir, fmt).is_file()  # type: ignore[arg-type]
    said: list[str] = []
    export_ci(run_dir, "bencher", warn=said.append)
    assert said[0] == "the run has not ended (status running): the file holds its trials so far"
