"""Nightly trends and regression alerts: runs of one matrix + inventory are grouped on the index
with a per-cell trend, and the newest run is checked against its lookback window; an A/A
simulation pins the false-alarm rate per night."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from helpers.report_synth import corruption_rate, synthetic_run, write_run

from orchestrator.core import clustered
from orchestrator.core.regression import NumberHistory, RateHistory, check_night, rate_change
from orchestrator.core.stats import wilson_interval
from orchestrator.report.build import build_report
from orchestrator.report.render import fresh_summary
from orchestrator.report.series import SeriesPoint, run_series
from orchestrator.report.site import regression_changes, write_index
from orchestrator.report.trends import NightRun, _rate, group_trends, regression_check, trend_svg
from orchestrator.store.journal import TrialRow
from orchestrator.store.runtrials import completed_rows


def _night(rng: np.random.Generator, p: float, icc: float, trials: int = 2, sessions: int = 40) -> tuple:
    ps = rng.beta(p * (1 - icc) / icc, (1 - p) * (1 - icc) / icc, size=trials) if icc and p else np.full(trials, p)
    return tuple((int(k), sessions) for k in rng.binomial(sessions, ps))


def _false_alarm_rate(icc: float, lookback: int, nights: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    alarms = 0
    for _ in range(nights):
        rates = [
            RateHistory(str(c), "corruption", tuple(_night(rng, p, icc) for _ in range(lookback)), _night(rng, p, icc))
            for c, p in enumerate([0.15, 0.15, 0.02, 0.02, 0.02, 0.02, 0.0, 0.0])
        ]
        numbers = [
            NumberHistory(
                str(c), "wall", tuple(tuple(rng.normal(10, 1, 2)) for _ in range(lookback)), tuple(rng.normal(10, 1, 2))
            )
            for c in range(2)
        ]
        alarms += any(c.flagged for c in check_night(rates, numbers))
    return alarms / nights


@pytest.mark.parametrize(("icc", "lookback"), [(0.0, 3), (0.05, 7)])
def test_a_a_false_alarms_per_night_at_most_5_percent(icc: float, lookback: int) -> None:
    """8 cells (15%, 2%, 0% rates) and a numeric metric in 2 of them, nothing changes between
    nights; trial-to-trial variation up to ICC 0.05 (the worst case of bench/bench_regression.py,
    which prints the whole table). 150 nights: the bound is 5% plus one standard error."""
    assert _false_alarm_rate(icc, lookback, nights=150, seed=11) <= 0.05 + 0.018


def test_a_real_jump_is_flagged_and_a_steady_cell_is_not() -> None:
    history = (((1, 40), (0, 40)), ((1, 40), (1, 40)), ((0, 40), (1, 40)), ((1, 40), (0, 40)))
    jumped = rate_change(RateHistory("c", "corruption", history, ((7, 40), (6, 40))))
    steady = rate_change(RateHistory("c", "corruption", history, ((1, 40), (0, 40))))
    assert jumped is not None and jumped.p < 0.001 and jumped.after == pytest.approx(13 / 80)
    assert steady is not None and steady.p > 0.5
    changes = check_night([RateHistory("a", "corruption", history, ((7, 40), (6, 40)))])
    assert changes[0].flagged and "quasi-binomial" in changes[0].method


def test_no_history_no_check() -> None:
    assert rate_change(RateHistory("c", "m", (), ((1, 40),))) is None
    assert check_night([RateHistory("c", "m", (), ((1, 40),))]) == []


def _nights(reports: Path, count: int, last_rate=corruption_rate) -> list[Path]:  # type: ignore[no-untyped-def]
    dirs = []
    for night in range(count):
        rate = last_rate if night == count - 1 else corruption_rate
        run_id = f"2026050{night + 1}-070000-overlap_ablation"
        manifest, records = synthetic_run(seed=night + 1, failures=False, rate=rate, run_id=run_id)
        day = f"2026-05-0{night + 1}"
        manifest = manifest.model_copy(update={"started": f"{day}T07:00:00Z", "ended": f"{day}T08:00:00Z"})
        dirs.append(write_run(reports / run_id, manifest, records))  # no page: the index rebuilds the summary
    return dirs


def test_index_groups_nightly_runs_with_trends_and_flags_the_regression(tmp_path: Path) -> None:
    def regressed(levels: dict[str, str]) -> float:  # overlap off now corrupts, where it never did
        return 0.3 if levels["overlap"] == "off" and levels["bf16_index_k"] == "off" else corruption_rate(levels)

    dirs = _nights(tmp_path, 5, regressed)
    page = write_index(tmp_path, fresh_summary).read_text()
    assert 'id="trends"' in page and page.count('<svg class="trend"') == 8  # one trend per cell
    assert "changed vs earlier runs:" in page
    flagged = regression_changes(dirs[-1], fresh_summary)
    flagged = [c for c in flagged if c.flagged]
    assert flagged and all("overlap=off" in c.cell and "bf16_index_k=off" in c.cell for c in flagged)
    assert all(c.metric == "corruption" and c.after > 0.2 for c in flagged)
    # the filter controls and the rows they filter
    assert re.search(r'<select data-filter="matrix">.*overlap_ablation', page)
    assert page.count('data-status="completed"') == 5


def test_steady_nights_raise_no_flag(tmp_path: Path) -> None:
    dirs = _nights(tmp_path, 4)
    page = write_index(tmp_path, fresh_summary).read_text()
    # not significant is not "unchanged" (the compare audit: the page said "no cell ... changed")
    assert "changed vs earlier runs:" not in page and "no cell or metric changed" not in page
    assert "no cell or metric differs significantly from the earlier runs (" in page
    assert "checked): not evidence that nothing changed." in page
    checked = regression_changes(dirs[-1], fresh_summary)
    assert not [c for c in checked if c.flagged]
    # what the count counts: a bare "(24 checked)" under 4 runs read as runs
    assert f"({len(checked)} cell-metric pairs checked)" in page and len(checked) > 1
    from orchestrator.report.compare import write_comparison_page

    compared = write_comparison_page(dirs[-2], dirs[-1]).path.read_text()
    assert f"({len(checked)} cell-metric pairs checked)" in compared


def test_a_running_run_is_never_the_trends_newest(tmp_path: Path) -> None:
    """The group's header named a run still running as its newest while the rates listed under
    "newest run" were the last finished run's: the header names the run the rates are from."""
    _nights(tmp_path, 2)
    run_id = "20260503-070000-overlap_ablation"  # started after both, cut off after 3 trials
    manifest, records = synthetic_run(seed=3, failures=False, status="running", run_id=run_id)
    manifest = manifest.model_copy(update={"started": "2026-05-03T07:00:00Z", "ended": None})
    write_run(tmp_path / run_id, manifest, sorted(records, key=lambda r: r.trial)[:3])
    page = write_index(tmp_path, fresh_summary).read_text()
    header = re.search(r'<section class="group".*?<h3>(.*?)</h3>', page, re.S)
    assert header is not None
    assert "3 runs, 2 finished" in header[1] and "newest finished 2026-05-02T07:00:00Z" in header[1], header[1]
    assert "2026-05-03" not in header[1]
    assert "newest finished run [95% CI]" in page
    said = " ".join(page.split())  # the audit: the note said so only as "3 runs, 2 finished"
    assert "Only finished runs (completed, or failed) are charted and checked: a run interrupted, stale" in said


def test_compare_and_webhook_summary_carry_the_nightly_check(tmp_path: Path) -> None:
    from orchestrator.report.compare import write_comparison_page
    from orchestrator.team.notify import summarize_run

    def regressed(levels: dict[str, str]) -> float:
        return 0.3 if levels["overlap"] == "off" and levels["bf16_index_k"] == "off" else corruption_rate(levels)

    dirs = _nights(tmp_path, 4, regressed)
    page = write_comparison_page(dirs[-2], dirs[-1])
    html = page.path.read_text()
    assert 'id="nightly"' in html and page.changes
    assert all("bf16_index_k=off" in line and "overlap=off" in line for line in page.changes)
    summary = summarize_run(dirs[-1])
    assert summary.changes == list(page.changes)
    assert "CHANGED vs earlier runs:" in summary.text()
    assert summarize_run(dirs[-2]).changes == []  # the nights before it were steady


def test_orch_compare_says_each_change_of_b_against_its_earlier_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The terminal says what the page's nightly section says: a warning per flagged change, and
    where the page went (its folder's name with brackets printed as written)."""
    from orchestrator.cli.main import main

    def regressed(levels: dict[str, str]) -> float:
        return 0.3 if levels["overlap"] == "off" and levels["bf16_index_k"] == "off" else corruption_rate(levels)

    dirs = _nights(tmp_path, 4, regressed)
    out = tmp_path / "[b]pages" / "cmp.html"
    out.parent.mkdir()
    assert main(["compare", str(dirs[-2]), str(dirs[-1]), "-o", str(out)]) == 0
    said = capsys.readouterr()
    warned = [line for line in said.err.splitlines() if "B changed against its earlier runs:" in line]
    assert warned and all("bf16_index_k=off" in line and "overlap=off" in line for line in warned), said.err
    assert said.out == f"comparison: {out}\n"


ICC_RATE, ICC, TRIALS, SESSIONS = 0.15, 0.05, 4, 50  # the README's own A/A setting


def _varying_trials(rng: np.random.Generator) -> list[tuple[int, int]]:
    a, b = ICC_RATE * (1 - ICC) / ICC, (1 - ICC_RATE) * (1 - ICC) / ICC
    return [(int(k), SESSIONS) for k in rng.binomial(SESSIONS, rng.beta(a, b, TRIALS))]


def _point(cell: str, trials: list[tuple[int, int]]) -> SeriesPoint:
    return SeriesPoint(cell=cell, levels={}, metric="m", kind="proportion", trials=trials)


def _night_run(run_id: str, points: list[SeriesPoint]) -> NightRun:
    return NightRun(run_id, run_id, "2026-05-01T07:00:00Z", "completed", points)


def test_trend_interval_of_a_lone_point_covers_95_percent_when_trials_vary() -> None:
    """Wilson on sessions pooled over 4 trials x 50 that vary (ICC 0.05) covered 15% in 69.8% of runs;
    widened by the point's own trials' dispersion it must hold 95% (2000 runs: 95% less 1.5 s.e.)."""
    rng = np.random.default_rng(3)
    rates = [_rate(_point("c", _varying_trials(rng))) for _ in range(2000)]
    covered = sum(r is not None and r[1] <= ICC_RATE <= r[2] for r in rates)
    assert covered / len(rates) >= 0.93


def test_trend_interval_with_the_runs_pooled_dispersion_covers_95_percent() -> None:
    """The trend uses the run's dispersion pooled over its cells, as the run's report does: 4 cells
    alike, 1000 runs, coverage of the first cell's interval."""
    rng = np.random.default_rng(7)
    covered = 0
    for night in range(1000):
        run = _night_run(str(night), [_point(f"c{c}", _varying_trials(rng)) for c in range(4)])
        rate = _rate(run.series[0], run.dispersions["m"])
        covered += rate is not None and rate[1] <= ICC_RATE <= rate[2]
    assert covered / 1000 >= 0.93


def test_trend_words_and_svg_use_the_widened_interval_of_the_newest_run() -> None:
    trials = [[(2, 50), (12, 50), (5, 50), (9, 50)], [(11, 50), (3, 50), (8, 50), (1, 50)]]
    run = _night_run("r1", [_point(f"c{i}", t) for i, t in enumerate(trials)])
    disp = clustered.dispersion(trials)
    assert run.dispersions["m"] == disp and disp.inflation() > 1
    low, high = clustered.rate_interval(28, 200, disp)
    trend = group_trends("k", "n", "tb", [run]).trends[0]
    assert trend.latest == f"{28 / 200:.1%} [{low:.1%}, {high:.1%}]"
    assert f"r1: {28 / 200:.1%} [{low:.1%}, {high:.1%}]" in trend.svg
    wilson = wilson_interval(28, 200)
    assert low < wilson[0] and high > wilson[1]


def test_trend_with_one_trial_per_cell_widens_as_the_report_does() -> None:
    """One trial per cell: trial-to-trial variation cannot be estimated, and the interval is the
    report's: Wilson widened by the least design effect orch assumes (1 + 39 x 0.005 for trials of 40
    sessions), not plain Wilson (which it kept here after the report had stopped showing it)."""
    run = _night_run("r1", [_point("c0", [(6, 40)]), _point("c1", [(1, 40)])])
    low, high = clustered.wilson_inflated(6, 40, clustered.prior_inflation(40))
    assert _rate(run.series[0], run.dispersions["m"]) == pytest.approx((6 / 40, float(low), float(high)))
    assert low < wilson_interval(6, 40)[0]


@pytest.mark.parametrize(("replicates", "rate"), [(1, corruption_rate), (3, lambda levels: 0.0), (3, corruption_rate)])
def test_the_index_states_the_reports_interval_for_each_cell(replicates: int, rate) -> None:
    """The runs index's trend and the run's report give one cell of one run the same 95% interval.
    They differed where trial-to-trial variation cannot be estimated (one trial per cell, or no
    event anywhere): 17.5% [8.7%, 31.9%] in the index, [8.2%, 33.5%] in the report."""
    manifest, records = synthetic_run(replicates=replicates, rate=rate, failures=False)
    report = build_report(manifest, records)
    night = NightRun(manifest.run_id, "d", manifest.started, "completed", run_series(completed_rows(
        [TrialRow.of(r, i) for i, r in enumerate(records)]
    )))  # fmt: skip
    trends = {
        t.cell: t.latest for t in group_trends("k", manifest.name, "tb", [night]).trends if t.metric == "corruption"
    }
    assert len(trends) == len(report.cells) == 8
    for cell in report.cells:
        r = cell.proportions["corruption"].rate
        assert trends[cell.cell] == f"{r.k / r.n:.1%} [{r.low:.1%}, {r.high:.1%}]", cell.cell


def test_compare_nightly_says_how_many_earlier_runs_and_no_more_than_not_significant(tmp_path: Path) -> None:
    """The page said "checked against up to 7 earlier finished runs" with one, and "No cell or metric
    of B changed" where the check only found no significant change (an audit of a real compare
    page: p 0.059 after Holm, the cell's direct comparison significant on the same page)."""
    from orchestrator.report.compare import write_comparison_page

    dirs = _nights(tmp_path, 2)
    html = write_comparison_page(dirs[0], dirs[1]).path.read_text()
    section = html[html.index('id="nightly"') :]
    assert "checked against 1 earlier finished run " in section
    assert "up to 7" not in section
    assert "changed against its earlier runs" not in section
    assert "No cell or metric of B differs significantly from its earlier runs" in section


def _scraped_night(night: int, trials: list[tuple[int, int]], server_metrics: int) -> NightRun:
    """One finished night of one cell: corruption's trials, and `server_metrics` scraped server
    metrics and a GPU reading beside it (numbers that differ a little every night)."""
    levels = {"overlap": "on"}
    points = [SeriesPoint(cell="c", levels=levels, metric="corruption", kind="proportion", trials=trials)]
    points += [
        SeriesPoint(
            cell="c",
            levels=levels,
            metric=f"server.decode.sglang:m{j}.delta",
            kind="number",
            values=[100.0 + night + j / 10, 101.0 + night],
        )
        for j in range(server_metrics)
    ]
    points.append(
        SeriesPoint(
            cell="c",
            levels=levels,
            metric="gpu.decode.power_w.mean",
            kind="number",
            values=[300.0 + night, 290.0 + 9 * night],
        )
    )
    return NightRun(f"r{night}", f"/runs/r{night}", f"2026-05-0{night + 1}T07:00:00Z", "completed", points)


def test_the_nightly_check_leaves_out_server_metrics_the_report_never_tests() -> None:
    """Server metrics and GPU readings are descriptive on the run's report (never tested): the
    nightly check tested them too, in one Holm family with the matrix's metrics, so the default
    scrape's dozens of server numbers per cell hid a corruption rise the check alone flags
    (audit of the exports: 200 tests in a 2x2 sweep, a 0% -> 25% rise adjusted to p=0.056)."""
    earlier = [_scraped_night(night, [(0, 40), (1, 40)], server_metrics=40) for night in (2, 1, 0)]
    newest = _scraped_night(3, [(4, 40), (3, 40)], server_metrics=40)
    changes = regression_check(newest, earlier)
    assert [c.metric for c in changes] == ["corruption"]
    assert changes[0].flagged and changes[0].p_holm == pytest.approx(changes[0].p)


def test_the_index_says_what_its_trend_intervals_and_its_check_are(tmp_path: Path) -> None:
    """The trend intervals are each run's report interval (Wilson's widened by the run's
    dispersion: 16/80 read [1.4%, 81.6%] in an audited run, where Wilson's is [12.7%, 30.0%]), and
    the check leaves out server metrics: the note called the first plain Wilson and the second
    every metric."""
    _nights(tmp_path, 2)
    page = " ".join(write_index(tmp_path, fresh_summary).read_text().split())
    assert "with its 95% Wilson interval" not in page
    assert "the 95% interval its run's report states (Wilson's, widened for trial-to-trial variation)" in page
    assert "every cell and metric of the matrix at once (server metrics and GPU readings are descriptive" in page


def test_a_trend_shows_its_own_scale_in_visible_text() -> None:
    """Each trend is drawn on its own scale, 0 to its highest interval's top: a 0.2% [0.0, 1.6]
    cell's bar stood as tall as a 15.2% [11.7, 19.6] one's, and the scale was only in a hover
    title. The chart says its scale where it is read."""
    svg = trend_svg([(0.002, 0.0, 0.016), (0.004, 0.001, 0.019)], ["r1", "r2"])
    visible = re.sub(r"<title>.*?</title>", "", svg)
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", visible)
    assert texts == ["1.9%", "0%"], texts


def _dots(svg: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)"', svg)]


def test_a_trends_dots_span_its_width_oldest_left_and_its_height_zero_to_the_top() -> None:
    """The sixteenth mutation round: the chart's geometry was never checked. The first run sits
    just right of the scale's labels, the newest at the right edge less the padding; rate 0 on the
    axis, the highest interval's top at the top."""
    svg = trend_svg([(0.0, 0.0, 0.05), (0.1, 0.05, 0.2), (0.05, 0.01, 0.1)], ["r1", "r2", "r3"])
    assert 'viewBox="0 0 240 48"' in svg
    assert _dots(svg) == [(40.0, 44.0), (138.0, 24.0), (236.0, 34.0)]
    bars = re.findall(r'<line x1="([\d.]+)" y1="([\d.]+)" x2="[\d.]+" y2="([\d.]+)" stroke="#8c959f"', svg)
    assert [(float(x), float(lo), float(hi)) for x, lo, hi in bars] == [
        (40.0, 44.0, 34.0),
        (138.0, 34.0, 4.0),
        (236.0, 42.0, 24.0),
    ]
    assert '<polyline points="40.0,44.0 138.0,24.0 236.0,34.0"' in svg
    assert svg.startswith("<svg ") and svg.index("<polyline") < svg.index("<circle") and svg.endswith("</svg>")
    lone = trend_svg([(0.1, 0.05, 0.2)], ["r1"])  # a group's first night
    assert _dots(lone) == [(40.0, 24.0)] and "<polyline" not in lone


def test_a_trend_whose_runs_have_no_data_draws_an_empty_chart_on_a_unit_scale() -> None:
    svg = trend_svg([None, None], ["r1", "r2"])
    assert "y up to 100.0%" in svg and _dots(svg) == [] and "<polyline" not in svg
    one = trend_svg([None, (0.1, 0.05, 0.2)], ["r1", "r2"])
    assert _dots(one) == [(236.0, 24.0)] and "<polyline" not in one  # one dot: no line to draw


def test_a_cell_missing_from_the_newest_run_says_so_and_a_stopped_cell_says_its_interval() -> None:
    older = _night_run("r1", [_point("c0", [(4, 40), (6, 40)]), _point("c1", [(1, 40), (0, 40)])])
    newest = _night_run(
        "r2",
        [
            SeriesPoint(cell="c1", levels={}, metric="m", kind="proportion", trials=[(9, 40), (8, 40)], stopped=True),
            _point("c2", [(0, 40), (0, 40)]),
        ],
    )
    trends = {t.cell: t for t in group_trends("k", "n", "tb", [newest, older]).trends}
    assert trends["c0"].latest == "no data in the newest finished run"
    assert len(_dots(trends["c0"].svg)) == 1
    assert trends["c1"].latest.endswith(" (stopped early: anytime-valid interval)")
    assert "r2 (stopped early: anytime-valid interval): " in trends["c1"].svg
    assert "r1: " in trends["c1"].svg and "r1 (stopped" not in trends["c1"].svg
    assert "stopped" not in trends["c2"].latest


def test_a_trends_scale_labels_sit_left_of_its_first_dot_inside_the_chart() -> None:
    """'0%' on the axis line, the top label near the top, both ending left of the first dot (they
    are right-aligned), all inside the viewBox: a label drawn outside it is not seen."""
    svg = trend_svg([(0.0, 0.0, 0.05), (0.1, 0.05, 0.2)], ["r1", "r2"])
    axis = re.search(r'<line x1="([\d.]+)" y1="([\d.]+)" x2="([\d.]+)" y2="([\d.]+)" stroke="#d0d7de"', svg)
    assert axis is not None
    x1, y1, x2, y2 = (float(v) for v in axis.groups())
    labels = {
        t: (float(x), float(y)) for x, y, t in re.findall(r'<text x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>', svg)
    }
    first_dot = _dots(svg)[0]
    assert y1 == y2 == labels["0%"][1] == first_dot[1]  # rate 0 on the axis, labelled there
    assert x1 < first_dot[0] and x2 == 240
    for x, y in labels.values():
        assert 0 < x <= first_dot[0] - 2.5 - 2 and 0 < y <= 48
    assert labels["20%"][1] < 48 / 2  # the top's label in the upper half
