"""The headline's verdicts (report.build) on designs their earlier tests did not build.

Found by mutation testing (bench/mutants.py, seed 20261206; bench/README.md): each test fails on a
one-line change to the verdict code that every earlier test passed. Runs built in memory
(helpers.cell_runs), no process."""

from __future__ import annotations

from helpers.cell_runs import cell_run, failed_record

from orchestrator.report.build import build_report

FACTORS = {"a": ["on", "off"], "b": ["on", "off"]}
BASE = {"a": "on", "b": "on"}


def test_a_design_without_single_flag_cells_still_gets_its_verdict() -> None:
    """Only the baseline and the cell that changes both flags ran: there is no one-flag opener, and
    the difference is told with its numbers (48/160 vs 4/160, Holm) as the run's one finding."""
    cells = [(BASE, [(1, 40)] * 4), ({"a": "off", "b": "off"}, [(12, 40)] * 4)]
    headline = build_report(*cell_run(FACTORS, BASE, cells)).headline
    assert not any("One flag at a time" in f.text for f in headline)
    found = [f.text for f in headline if f.kind == "finding"]
    assert len(found) == 1, headline
    assert found[0].startswith("Corruption is 30.0% [23.4-37.5] (48/160) in cell a=off, b=off vs 2.5%"), found
    assert "1 of 1 cells differ significantly from the baseline" in found[0]


def test_a_baseline_without_data_is_said_and_nothing_is_compared() -> None:
    """Every baseline trial failed while the other cells measured: no cell can be compared with it,
    the headline says so as a caution, and it calls nothing a finding (12/40 against nothing)."""
    cells = [(BASE, [(1, 40)] * 3), ({"a": "off", "b": "on"}, [(12, 40)] * 3), ({"a": "on", "b": "off"}, [(2, 40)] * 3)]
    manifest, records = cell_run(FACTORS, BASE, cells)
    records = [failed_record(p) if p.is_baseline else r for p, r in zip(manifest.plan, records, strict=True)]
    headline = build_report(manifest, records).headline
    cautions = [f.text for f in headline if f.kind == "caution"]
    assert "The baseline cell has no completed corruption data, so no cell can be compared with it." in cautions
    assert not [f for f in headline if f.kind == "finding"], headline
