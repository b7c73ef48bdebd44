"""Runs of one matrix over time: per-cell trends (an inline SVG of each run's rate with its 95%
interval) and the nightly regression check of the newest run against its lookback window.

The trial is the unit of replication here as in the run's report: a run's interval is Wilson's
widened by the trial-to-trial dispersion pooled over the run's cells (core.clustered), because
Wilson on sessions pooled over trials that vary covers the true rate far less than 95% (70% at 4
trials x 50 sessions, intra-trial correlation 0.05).

Everything here works from summary.json contents (report.series), so the index of a year of
nightly runs reads a few KB per run, never an old journal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from xml.sax.saxutils import escape

from orchestrator.core import clustered
from orchestrator.core.records import scraped
from orchestrator.core.regression import LOOKBACK, Change, NumberHistory, RateHistory, check_night
from orchestrator.core.words import counted
from orchestrator.report.series import SeriesPoint

USABLE = ("completed", "failed")  # a run that finished (with or without failed trials) is a night
TREND_RUNS = 30  # points per trend line (the newest)


@dataclass(frozen=True)
class NightRun:
    """What the trend and the regression check need of one run."""

    run_id: str
    directory: str
    started: str
    status: str
    series: Sequence[SeriesPoint]

    @cached_property
    def points(self) -> dict[tuple[str, str], SeriesPoint]:
        """(cell, metric) -> its point: trends and checks look each up once per run."""
        return {(p.cell, p.metric): p for p in self.series}

    @cached_property
    def dispersions(self) -> dict[str, clustered.Dispersion]:
        """metric -> its trial-to-trial dispersion pooled over the run's cells, as the run's report
        estimates it (one cell's few trials alone would give a far wider, less informed interval)."""
        groups: dict[str, list[list[tuple[int, int]]]] = {}
        for p in self.series:
            if p.kind == "proportion" and p.trials:
                groups.setdefault(p.metric, []).append(list(p.trials))
        return {metric: clustered.dispersion(cells) for metric, cells in groups.items()}


@dataclass(frozen=True)
class CellTrend:
    cell: str
    metric: str
    svg: str  # inline SVG (numbers and escaped text only)
    latest: str  # newest run's rate and interval, in words ("stopped early" when a rule stopped the cell)


@dataclass(frozen=True)
class GroupTrend:
    """One matrix + inventory: its runs newest first, trends per cell, the newest run's changes."""

    key: str
    name: str
    testbed: str
    runs: tuple[NightRun, ...]  # newest first
    trends: tuple[CellTrend, ...]
    changes: tuple[Change, ...]  # flagged first; empty when the newest run has no lookback
    checked_run: str = ""  # the run the changes are about

    @property
    def flagged(self) -> list[Change]:
        return [c for c in self.changes if c.flagged]

    @property
    def finished(self) -> list[NightRun]:
        """The runs the trends and the check are made of (newest first): a run still running, cut
        off or stale is counted in `runs` but is never the newest point, nor named as such."""
        return [r for r in self.runs if r.status in USABLE]


def checked_metric(metric: str) -> bool:
    """Whether the nightly check tests a metric: the matrix's own (its repro's metrics and its
    collectors), as the run's report does. Server metrics and GPU readings (`server.*`, `gpu.*`)
    are descriptive there (report.servertable: never tested), and here they were not: the default
    scrape adds ~46 of them per cell, so a 2x2 sweep's check held 200 tests instead of 16, and a
    corruption rise 0% -> 25% (p=0.00028) was Holm-adjusted to 0.056 and never flagged."""
    return not scraped(metric)


def regression_check(newest: NightRun, earlier: Sequence[NightRun]) -> list[Change]:
    """The newest run against up to LOOKBACK earlier finished runs (newest first), every cell and
    checked metric (checked_metric) of the newest run, Holm-adjusted together (core.regression)."""
    history = [r for r in earlier if r.status in USABLE][:LOOKBACK][::-1]  # oldest first
    if not history:
        return []
    rates, numbers = [], []
    for point in newest.series:
        if not checked_metric(point.metric):
            continue
        past = [_point(r, point.cell, point.metric) for r in history]
        found = [p for p in past if p is not None]
        if not found:
            continue
        if point.kind == "proportion":
            rates.append(
                RateHistory(point.cell, point.metric, tuple(tuple(p.trials) for p in found), tuple(point.trials))
            )
        else:
            numbers.append(
                NumberHistory(point.cell, point.metric, tuple(tuple(p.values) for p in found), tuple(point.values))
            )
    units = {(p.cell, p.metric): p.unit for p in newest.series if p.unit}
    return [replace(c, unit=units.get((c.cell, c.metric), "")) for c in check_night(rates, numbers)]


def _point(run: NightRun, cell: str, metric: str) -> SeriesPoint | None:
    return run.points.get((cell, metric))


def change_text(c: Change) -> str:
    """One flagged change in words, with the same p the check used."""
    if c.method.startswith("Mann-Whitney"):
        unit = f" {c.unit}" if c.unit else ""
        before, after = f"median {c.before:.4g}{unit}", f"{c.after:.4g}{unit}"
    else:
        before, after = f"{c.before:.1%}", f"{c.after:.1%}"
    return (
        f"{c.metric} in {c.cell}: {before} over the previous {counted(c.nights, 'run')} -> {after} now "
        f"(p={c.p:.2g}, Holm-adjusted {c.p_holm:.2g}; {c.method})"
    )


def group_trends(key: str, name: str, testbed: str, runs_newest_first: Sequence[NightRun]) -> GroupTrend:
    runs = tuple(runs_newest_first)
    finished = [r for r in runs if r.status in USABLE]
    changes: list[Change] = []
    checked = ""
    if finished:
        changes = regression_check(finished[0], finished[1:])
        checked = finished[0].run_id
    return GroupTrend(key, name, testbed, runs, tuple(_trends(finished)), tuple(changes), checked)


def _trends(finished: Sequence[NightRun]) -> list[CellTrend]:
    """A trend per (cell, proportion metric) seen in these runs, oldest run on the left."""
    runs = list(finished[:TREND_RUNS])[::-1]
    keys: list[tuple[str, str]] = []
    for run in runs:
        for p in run.series:
            if p.kind == "proportion" and (p.cell, p.metric) not in keys:
                keys.append((p.cell, p.metric))
    out = []
    for cell, metric in keys:
        points = [_point(r, cell, metric) for r in runs]
        rates = [_rate(p, r.dispersions.get(metric)) for p, r in zip(points, runs, strict=True)]
        latest = rates[-1]
        words = (
            "no data in the newest finished run"
            if latest is None
            else f"{latest[0]:.1%} [{latest[1]:.1%}, {latest[2]:.1%}]" + _stopped_words(points[-1])
        )
        labels = [r.run_id + _stopped_words(p) for p, r in zip(points, runs, strict=True)]
        out.append(CellTrend(cell, metric, trend_svg(rates, labels), words))
    return out


def _stopped_words(point: SeriesPoint | None) -> str:
    return " (stopped early: anytime-valid interval)" if point is not None and point.stopped else ""


def _rate(point: SeriesPoint | None, disp: clustered.Dispersion | None = None) -> tuple[float, float, float] | None:
    """(rate, low, high) of a run's cell: the interval the run's report shows for it (clustered.cell_rate):
    Wilson widened by `disp` (the run's dispersion, or the point's own trials' when none is given),
    and where trials cannot show their spread by the least design effect orch assumes. It was plain
    Wilson there, narrower than the report's interval for the same cell of the same run; and for a
    cell an adaptive rule stopped early (point.stopped), the report's anytime-valid interval."""
    if point is None:
        return None
    if point.shown is not None:  # its report's own, when the kept trials cannot give it (report.series)
        return point.shown
    k, n = point.rate
    if n == 0:
        return None
    spread = disp if disp is not None else clustered.dispersion([point.trials])
    interval = clustered.cell_rate(k, n, spread, len(point.trials), stopped=point.stopped)
    return k / n, interval.low, interval.high


def trend_svg(rates: Sequence[tuple[float, float, float] | None], labels: Sequence[str]) -> str:
    """Rate per run (dot) with its 95% interval (bar), oldest left; the y axis is 0..max(high),
    each trend its own, so its ends are written at its left (a bar's height compares runs of one
    cell, never cells)."""
    width, height, pad, scale = 240, 48, 4, 36
    top = max((r[2] for r in rates if r is not None), default=0.0) or 1.0
    step = (width - scale - 2 * pad) / max(1, len(rates) - 1)

    def y(v: float) -> float:
        return height - pad - (height - 2 * pad) * v / top

    parts = [
        f'<svg class="trend" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img"><title>rate per run, oldest left; y up to {top:.1%}</title>',
        f'<line x1="{scale}" y1="{height - pad}" x2="{width}" y2="{height - pad}" stroke="#d0d7de"/>',
        f'<text x="{scale - 4}" y="{pad + 8}" text-anchor="end" font-size="10" fill="#57606a">{_scale_pct(top)}</text>',
        f'<text x="{scale - 4}" y="{height - pad}" text-anchor="end" font-size="10" fill="#57606a">0%</text>',
    ]
    line = []
    for i, (r, label) in enumerate(zip(rates, labels, strict=True)):
        if r is None:
            continue
        x = scale + pad + i * step
        line.append(f"{x:.1f},{y(r[0]):.1f}")
        parts.append(
            f"<g><title>{escape(label)}: {r[0]:.1%} [{r[1]:.1%}, {r[2]:.1%}]</title>"
            f'<line x1="{x:.1f}" y1="{y(r[1]):.1f}" x2="{x:.1f}" y2="{y(r[2]):.1f}" stroke="#8c959f"/>'
            f'<circle cx="{x:.1f}" cy="{y(r[0]):.1f}" r="2.5" fill="#1f6feb"/></g>'
        )
    if len(line) > 1:
        parts.insert(4, f'<polyline points="{" ".join(line)}" fill="none" stroke="#1f6feb" stroke-width="1"/>')
    parts.append("</svg>")
    return "".join(parts)


def _scale_pct(top: float) -> str:
    """The top of a trend's scale, as few digits as tell it: 1.9%, 20%, 0.05%."""
    return f"{top * 100:.2g}%" if top < 0.1 else f"{top:.0%}"
