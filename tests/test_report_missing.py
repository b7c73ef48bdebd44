"""Trials without data: a finding whose compared cells lost different shares of their trials says so.

A cell that crashes under load keeps only its light trials; its latency, compared over completed
trials only, then looks better than the baseline's. The report used to call that a finding with no
word of the failures (bench/bench_truth.py (2): 0 of 21 such findings told). Pure: runs built in
memory (helpers.cell_runs), no processes."""

from __future__ import annotations

import re

import pytest
from helpers.cell_runs import cell_run, failed_record

from orchestrator.core.records import RunManifest, TrialRecord
from orchestrator.report import missing
from orchestrator.report.build import build_report
from orchestrator.report.render import render_report

FACTORS = {"a": ["on", "off"], "b": ["on", "off"]}
BASE = {"a": "on", "b": "on"}
CRASHY = {"a": "off", "b": "on"}
METRICS = {"failures": "proportion", "latency": "number"}


def _run(crashed: int, retried_then_completed: int = 0) -> tuple[RunManifest, list[TrialRecord]]:
    """10 trials per cell, every cell at 30-39 ms and 1 failure in 30 sessions a trial, except CRASHY:
    its first `crashed` trials failed for good, and the rest ran fast (10-15 ms): its light trials."""
    cells = []
    for levels in ({"a": a, "b": b} for a in ("on", "off") for b in ("on", "off")):
        slow = levels == CRASHY
        cells.append((levels, [{"failures": (1, 30), "latency": (10.0 if slow else 30.0) + i} for i in range(10)]))
    manifest, records = cell_run(FACTORS, BASE, cells, metrics=dict(METRICS))
    out: list[TrialRecord] = []
    crashy = [p for p in manifest.plan if p.levels == CRASHY]
    gone = {p.trial for p in crashy[:crashed]}
    flaky = {p.trial for p in crashy[crashed : crashed + retried_then_completed]}
    for planned, record in zip(manifest.plan, records, strict=True):
        if planned.trial in gone:
            out.append(failed_record(planned))
            continue
        if planned.trial in flaky:  # failed once, then completed on its retry: not missing
            out.append(failed_record(planned, retried=True))
            record = record.model_copy(update={"attempt": 2})
        out.append(record)
    return manifest, out


def _latency_findings(manifest: RunManifest, records: list[TrialRecord]) -> list[str]:
    report = build_report(manifest, records)
    return [f.text for f in report.headline if f.kind == "finding" and "latency" in f.text.lower()]


def test_cells_count_their_finished_trials_without_data() -> None:
    report = build_report(*_run(crashed=4, retried_then_completed=2))
    by_levels = {tuple(c.levels.values()): c for c in report.cells}
    crashy = by_levels[("off", "on")]
    assert (crashy.ran, crashy.missing) == (10, {"failures": 4, "latency": 4})
    assert crashy.failed == 6  # the attempts, retried ones too; only the 4 that ended a trial lack data
    assert all((c.ran, c.missing) == (10, {"failures": 0, "latency": 0}) for c in report.cells if c is not crashy)


def test_a_latency_finding_says_its_cells_lost_different_shares_of_trials() -> None:
    found = _latency_findings(*_run(crashed=4))
    assert found, "the crashing cell's light trials make its latency a finding"
    for text in found:
        assert missing.WORDS in text and "4 of its 10 finished trials" in text, text
        assert "flatters cell a=off, b=on" in text, text


def test_no_caution_when_the_cells_lost_alike() -> None:
    found = _latency_findings(*_run(crashed=0))
    assert found and not any(missing.WORDS in t or "Caution" in t for t in found)


def test_one_lost_trial_in_twelve_is_not_material() -> None:
    cell = build_report(*_run(crashed=1)).cells[0]
    lost = cell.model_copy(update={"ran": 12, "missing": {"latency": 1}})
    kept = cell.model_copy(update={"cell": "other", "ran": 12, "missing": {"latency": 0}})
    assert missing.clause("latency", [lost, kept]) == ""
    two = lost.model_copy(update={"missing": {"latency": 2}})  # 16.7 points apart
    assert missing.WORDS in missing.clause("latency", [two, kept])


def test_the_cells_table_shows_trials_without_data() -> None:
    html = render_report(build_report(*_run(crashed=4)))
    assert "(4 of 10 trials without data)" in html


def test_a_rate_finding_says_so_too() -> None:
    """The proportion's sentences (single flags, the cell vs the baseline, what the baseline's rate
    needs, the interaction): the crashing cell shows ~no failed session over the trials it kept, the
    others 10-11 in 30 per trial."""
    cells = []
    for levels in ({"a": a, "b": b} for a in ("on", "off") for b in ("on", "off")):
        k = 0 if levels == CRASHY else 10
        cells.append((levels, [{"failures": (k + i % 2, 30), "latency": 30.0 + i} for i in range(10)]))
    manifest, records = cell_run(FACTORS, BASE, cells, metrics=dict(METRICS))
    crashy = [p.trial for p in manifest.plan if p.levels == CRASHY][:5]
    records = [failed_record(p) if p.trial in crashy else r for p, r in zip(manifest.plan, records, strict=True)]
    found = [f.text for f in build_report(manifest, records).headline if f.kind == "finding"]
    assert sum(t.startswith("Failures is") for t in found) == 2 and len(found) == 4, found  # + cause, interaction
    for text in found:
        assert "cell a=off, b=on: 5 of its 10 finished trials without data (failed)" in text, text


def _run_with_a_crashing_cell(high: bool) -> tuple[RunManifest, list[TrialRecord]]:
    """CRASHY lost 5 of its 10 trials. `high`: it has 10-11 failed sessions in 30 per trial and the
    others ~none (so it is the highest cell, with one-factor comparisons), and a=off is 20 ms slower;
    else the reverse (it keeps ~no failed session over the trials it kept, and runs 20 ms faster)."""
    cells = []
    for levels in ({"a": a, "b": b} for a in ("on", "off") for b in ("on", "off")):
        k = 10 if (levels == CRASHY) == high else 0
        ms = (30.0 if levels["a"] == "off" else 10.0) if high else (10.0 if levels == CRASHY else 30.0)
        cells.append((levels, [{"failures": (k + i % 2, 30), "latency": ms + i} for i in range(10)]))
    manifest, records = cell_run(FACTORS, BASE, cells, metrics=dict(METRICS))
    crashy = [p.trial for p in manifest.plan if p.levels == CRASHY][:5]
    return manifest, [failed_record(p) if p.trial in crashy else r for p, r in zip(manifest.plan, records, strict=True)]


def _marked_rows(html: str, section: str) -> list[tuple[str, int]]:
    """The table rows of a section that mark a finding, each with how many marks it has ("yes" in a
    finding column, a numeric cell's "sig.")."""
    body = html.split(f'<section id="{section}">', 1)[1].split("</section>", 1)[0]
    rows = [
        (row, len(re.findall(r'class="flag"[^>]*>yes', row)) + row.count("<b>sig.</b>"))
        for row in body.split("<tr")[1:]
    ]
    return [(row, marks) for row, marks in rows if marks]


@pytest.mark.parametrize("high", [False, True], ids=["crashing-cell-low", "crashing-cell-high"])
def test_the_tables_that_mark_a_finding_carry_its_caution(high: bool) -> None:
    """A reader of the Effects, Interactions, one-factor, numeric-effect and Cells tables sees a
    finding's mark; the caution the headline gives (missing.clause) must stand beside each such mark,
    or the table calls the crashing cell's easy trials a finding with no word of its failures."""
    report = build_report(*_run_with_a_crashing_cell(high))
    html = render_report(report)
    effects, cells = _marked_rows(html, "effects"), _marked_rows(html, "cells")
    assert any("-way</td>" in row for row, _ in effects) and any('title="a=off,b=on"' in row for row, _ in cells)
    if high:  # the highest cell's one-factor table and the latency effects mark findings too
        assert any(nb.finding for nb in report.neighbours) and any(e.finding for e in report.number_effects)
    for row, marks in effects + [(row, marks) for row, marks in cells if 'title="a=off,b=on"' in row]:
        assert row.count('<span class="caution">') == marks and "5 of 10 finished trials without data" in row, row
    for row, _ in cells:  # a cell that lost alike with the baseline is marked without one
        assert 'title="a=off,b=on"' in row or "caution" not in row, row


def test_a_finding_whose_cells_lost_alike_is_marked_without_caution() -> None:
    html = render_report(build_report(*_run(crashed=0)))
    marked = _marked_rows(html, "effects") + _marked_rows(html, "cells")
    assert marked and not any(missing.WORDS in row or "caution" in row for row, _ in marked)


def _run_with_a_dead_cell(rate_off: int) -> tuple[RunManifest, list[TrialRecord]]:
    """4 trials of 40 per cell, cell a=off, b=off's all failed (no data); cell a=off, b=on at
    `rate_off` failed sessions a trial, the others at 3-6."""
    cells = [(lv, [{"failures": (rate_off if lv == CRASHY else 3 + i, 40)} for i in range(4)]) for lv in _grid()]
    manifest, records = cell_run(FACTORS, BASE, cells, metrics={"failures": "proportion"})
    dead = {p.trial for p in manifest.plan if p.levels == {"a": "off", "b": "off"}}
    return manifest, [failed_record(p) if p.trial in dead else r for p, r in zip(manifest.plan, records, strict=True)]


def _grid() -> list[dict[str, str]]:
    return [{"a": a, "b": b} for a in ("on", "off") for b in ("on", "off")]


def test_a_result_over_the_cells_says_which_cells_had_no_data_to_compare() -> None:
    """'No significant difference between any cell and the baseline' was said of a run one of whose
    cells had no completed trial, and '1 of 3 cells differ' counted that cell among those compared."""
    null = next(f.text for f in build_report(*_run_with_a_dead_cell(4)).headline if f.kind == "null")
    assert "between any of the 2 cells compared and the baseline" in null, null
    assert "cell a=off, b=off has no failures data, so it was not compared" in null, null
    found = [f.text for f in build_report(*_run_with_a_dead_cell(30)).headline if f.kind == "finding"]
    assert any("1 of the 2 cells compared differ significantly from the baseline" in t for t in found), found
    assert not any("of 3 cells" in t for t in found), found


def test_the_power_sentence_of_unequal_cells_says_its_trials_are_the_fewest() -> None:
    """30 trials in three cells, 2 in the fourth: the no-finding sentence said 'With 2 trials of 40
    sessions per cell', a design this run did not have (its figure is for the smallest cell's count)."""
    cells = [(lv, [{"failures": (4 + i % 3, 40)} for i in range(2 if lv == CRASHY else 30)]) for lv in _grid()]
    null = next(
        f.text
        for f in build_report(*cell_run(FACTORS, BASE, cells, {"failures": "proportion"})).headline
        if f.kind == "null"
    )
    assert "With 2 trials of 40 sessions in the cell with the fewest (simulated as if every cell had as few)" in null, (
        null
    )


def test_the_single_flag_opener_names_a_change_it_has_no_data_for() -> None:
    """Cell a=off, b=on (turning off a alone) lost every trial: the opener listed only b's change and
    said 'no single-flag change differs significantly from the baseline', a result for a change
    nothing was measured of."""
    cells = [(lv, [{"failures": (4 + i % 3, 40)} for i in range(4)]) for lv in _grid()]
    manifest, records = cell_run(FACTORS, BASE, cells, {"failures": "proportion"})
    records = [failed_record(p) if p.levels == CRASHY else r for p, r in zip(manifest.plan, records, strict=True)]
    opener = build_report(manifest, records).headline[0].text
    assert opener.startswith("Failures is") and "turning off a: no data (no trial completed with failures)" in opener
    assert "no single-flag change of the 1 compared differs significantly from the baseline" in opener, opener


def test_the_charts_red_marks_carry_the_caution_too() -> None:
    """The rate and effects charts mark a finding red; a red bar of the crashing cell's comparison
    said nothing of its lost trials."""
    html = render_report(build_report(*_run_with_a_crashing_cell(high=False)))
    charts = html.split('<section id="charts">', 1)[1].split("</section>", 1)[0]
    assert charts.count(f"(caution: trials {missing.WORDS})") >= 2, charts  # the cell's rate, a's effect


@pytest.mark.parametrize(
    ("failed", "said"),
    [
        (0, "4 of its 10 finished trials without data (completed without a measurement of failures)"),
        (2, "6 of its 10 finished trials without data (2 failed, 4 completed without a measurement of failures)"),
    ],
)
def test_trials_completed_without_the_metric_are_not_called_failed(failed: int, said: str) -> None:
    """An older journal's records of a proportion over 0 sessions (n = 0) are completed trials with no
    measurement of it: the caution counts them as without data and says what they were, not "failed"."""
    cells = []
    for levels in ({"a": a, "b": b} for a in ("on", "off") for b in ("on", "off")):
        k = 0 if levels == CRASHY else 10
        cells.append((levels, [{"failures": (k + i % 2, 30), "latency": 30.0 + i} for i in range(10)]))
    manifest, records = cell_run(FACTORS, BASE, cells, metrics=dict(METRICS))
    crashy = [p for p in manifest.plan if p.levels == CRASHY]
    empty, gone = {p.trial for p in crashy[:4]}, {p.trial: p for p in crashy[4 : 4 + failed]}
    records = [
        failed_record(gone[r.trial]) if r.trial in gone else _no_sessions(r) if r.trial in empty else r for r in records
    ]
    found = [f.text for f in build_report(manifest, records).headline if f.kind == "finding"]
    cautioned = [t for t in found if "Caution: failures" in t]
    assert cautioned, found
    for text in cautioned:
        assert f"cell a=off, b=on: {said}; " in text and "(failed)" not in text, text


def _no_sessions(record: TrialRecord) -> TrialRecord:
    """The record as an older journal wrote a proportion it measured over no session: n = 0."""
    metrics = {**record.metrics, "failures": record.metrics["failures"].model_copy(update={"k": 0, "n": 0})}
    return record.model_copy(update={"metrics": metrics})
