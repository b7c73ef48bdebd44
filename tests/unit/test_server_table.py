"""The report's server-metrics table (report.servertable) from trial records, without processes.

The sixteenth mutation round found it proven only by the simulator's end-to-end test: deleting
a field of its rows changed nothing the unit tier could see. These numbers are descriptive (never
tested), but they are what a reader checks a cell by: each row's median must be the cell's own
completed trials', its trial count theirs, a lost scrape counted against its cell, and the rows the
reader looks at first (throughput, TTFT, queue depth) on top.
"""

from __future__ import annotations

import re
import statistics

import pytest
from helpers.report_synth import ALL_OFF, ALL_ON, cell_id, synthetic_run

from orchestrator.core.records import MetricValue, TrialRecord
from orchestrator.report import servertable
from orchestrator.report.build import build_report
from orchestrator.report.render import render_report

TTFT = "server.decode.sglang:time_to_first_token_seconds.p90"
THROUGHPUT = "server.decode.sglang:gen_throughput.mean"
POWER = "gpu.decode.power_w.mean"
LATER = "server.prefill.sglang:zz_other.delta"  # no reader's first look: after the named ones


def _with_server_metrics(records: list[TrialRecord]) -> list[TrialRecord]:
    """Every completed trial scraped: TTFT and throughput from its trial number, GPU power on the
    all-on cell only, and the all-off cell's trial 0 of each round lost its decode scrape."""
    out = []
    for r in records:
        if r.status != "completed":
            out.append(r)
            continue
        metrics = dict(r.metrics)
        if r.cell == cell_id(ALL_OFF) and r.round == 0:
            metrics["server.decode.missing"] = MetricValue(kind="number", unit="connection refused")
        else:
            metrics[TTFT] = MetricValue(kind="number", value=0.1 * (r.trial + 1))
            metrics[THROUGHPUT] = MetricValue(kind="number", value=1000.0 + r.trial)
            metrics[LATER] = MetricValue(kind="number", value=3.0)
        if r.cell == cell_id(ALL_ON):
            metrics[POWER] = MetricValue(kind="number", value=600.0 + r.trial)
        out.append(r.model_copy(update={"metrics": metrics}))
    return out


def _values(records: list[TrialRecord], metric: str) -> dict[str, list[float]]:
    """Cell -> the values of `metric` its completed trials have (a trial without one left out)."""
    values: dict[str, list[float]] = {}
    for r in records:
        value = r.metrics.get(metric)
        if r.status == "completed" and value is not None and value.value is not None:
            values.setdefault(r.cell, []).append(value.value)
    return values


def _expected_medians(records: list[TrialRecord], metric: str) -> dict[str, float]:
    return {cell: statistics.median(v) for cell, v in _values(records, metric).items()}


def test_each_row_is_the_median_of_a_cells_own_trials_with_its_count_and_unit() -> None:
    manifest, records = synthetic_run(replicates=3)
    records = _with_server_metrics(records)
    table = build_report(manifest, records).server
    assert table is not None
    rows = {row.metric: row for row in table.rows}
    assert set(rows) == {TTFT, THROUGHPUT, POWER, LATER}
    for metric in rows:
        assert rows[metric].median == _expected_medians(records, metric), metric
        assert rows[metric].trials == {cell: len(v) for cell, v in _values(records, metric).items()}
    assert set(rows[POWER].median) == {cell_id(ALL_ON)}  # cells without a value left out
    assert rows[TTFT].trials[cell_id(ALL_OFF)] == 2  # 3 rounds, round 0's scrape lost
    assert (rows[TTFT].unit, rows[THROUGHPUT].unit, rows[POWER].unit, rows[LATER].unit) == ("s", "tok/s", "W", "")
    assert table.missing == {cell_id(ALL_OFF): 1}


def test_the_rows_a_reader_looks_at_first_lead_and_the_rest_follow_by_name() -> None:
    manifest, records = synthetic_run()
    table = build_report(manifest, _with_server_metrics(records)).server
    assert table is not None
    assert [row.metric for row in table.rows] == [THROUGHPUT, TTFT, POWER, LATER]


def test_a_run_without_server_metrics_has_no_table_and_a_lost_scrape_alone_makes_one() -> None:
    manifest, records = synthetic_run()
    assert build_report(manifest, records).server is None
    lost = [
        r.model_copy(
            update={"metrics": {**r.metrics, "gpu.decode.missing": MetricValue(kind="number", unit="no nvidia-smi")}}
        )
        if r.status == "completed" and r.trial == 0
        else r
        for r in records
    ]
    table = build_report(manifest, lost).server
    assert table is not None and table.rows == [] and table.missing == {lost[0].cell: 1}


def test_the_table_is_cut_at_its_row_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(servertable, "MAX_ROWS", 2)
    manifest, records = synthetic_run()
    table = build_report(manifest, _with_server_metrics(records)).server
    assert table is not None and [row.metric for row in table.rows] == [THROUGHPUT, TTFT]


def test_the_page_shows_each_row_in_the_cells_columns_and_the_lost_scrapes() -> None:
    manifest, records = synthetic_run(replicates=3)
    records = _with_server_metrics(records)
    report = build_report(manifest, records)
    page = render_report(report)
    section = page[page.index('<section id="server">') :]
    section = section[: section.index("</section>")]
    assert f"{cell_id(ALL_OFF)}: 1" in section
    for metric, unit in ((TTFT, "s"), (POWER, "W")):
        row = re.search(r"<tr><td>" + re.escape(metric) + "</td><td>" + unit + "</td>(.*?)</tr>", section, re.S)
        assert row is not None, metric
        shown = re.findall(r'<td class="num"[^>]*>([^<]*)</td>', row.group(1))
        medians = _expected_medians(records, metric)
        assert shown == [f"{medians[c.cell]:.4g}" if c.cell in medians else "–" for c in report.cells], metric


def test_a_scraped_metric_without_a_value_is_left_out_of_its_cells_median() -> None:
    """A reading journaled with no value (a quantile of an empty histogram) is neither a number
    nor a lost scrape: the median and count are of the trials that have one."""
    manifest, records = synthetic_run()
    records = _with_server_metrics(records)
    blank = next(r for r in records if r.status == "completed" and TTFT in r.metrics)
    records = [
        r.model_copy(update={"metrics": {**r.metrics, TTFT: MetricValue(kind="number")}}) if r is blank else r
        for r in records
    ]
    table = build_report(manifest, records).server
    assert table is not None
    row = next(row for row in table.rows if row.metric == TTFT)
    assert row.median == _expected_medians(records, TTFT)
    assert row.trials[blank.cell] == len(_values(records, TTFT)[blank.cell])
    assert table.missing == {cell_id(ALL_OFF): 1}  # no value is not a lost scrape
