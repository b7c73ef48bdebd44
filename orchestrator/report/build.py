"""A run (manifest + trial records) -> the report model: what is known, how sure, and why.

Pure: no I/O. render.py turns the model into HTML; this module decides every number and every
sentence, so the words can be tested without a browser. The report must survive the mistakes
that cost the DSV4 team days: a noisy rate read without its interval, a metric that moved while
the outcome did not (320 vs 997 anomalies, same corruption), a trend over time read as an effect.

Rules kept here:
- only trials with status "completed" are data; failed and interrupted ones are listed, never
  counted; a trial's data is its completed record (store.runtrials: the rule export and compare
  share, and what a damaged journal is);
- every rate carries its Wilson interval and k/n; every comparison with the baseline a Fisher
  (proportions) or Mann-Whitney (numbers) p-value, Holm-adjusted over every test the report could
  call a finding, all metrics in one family (core.findings);
- secrets never reach the model: env values whose names look secret are replaced by "••••", and
  `NAME=value` / `NAME: value` text with such names is masked in free text.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from orchestrator.core import clustered, family, findings, power, ranks, stats, trialexact
from orchestrator.core.gcpause import gc_paused
from orchestrator.core.masking import mask_record
from orchestrator.core.records import EventRecord, MetricKind, MetricValue, RunManifest, TrialRecord
from orchestrator.core.redact import Redactor
from orchestrator.core.words import counted, noun
from orchestrator.report import missing, stopped
from orchestrator.report.effects import number_views, proportion_views
from orchestrator.report.metricrows import CellRows, MetricRows
from orchestrator.report.model import (
    BoxStats,
    CellView,
    DriftView,
    EffectView,
    FailureView,
    Finding,
    FindingKind,
    HuntView,
    InteractionView,
    Link,
    NeighbourView,
    NumberCell,
    NumberEffectView,
    ProportionCell,
    Provenance,
    RateView,
    Report,
    RoundRate,
    TrialView,
)
from orchestrator.report.provenance import Served, controller_lines, served
from orchestrator.report.servertable import server_table
from orchestrator.report.testbeds import testbed_findings as testbed_findings  # its home; kept importable here
from orchestrator.store.journal import TrialRow
from orchestrator.store.runtrials import completed_rows, trial_rows

DRILLDOWN_CAP = 1000  # per-trial detail shown in the page; the journal keeps every record
FAILURE_CAP = 500
TRIAL_RATES_SHOWN = 12
HOST_ROWS_SHOWN = 40  # a parallel run's testbeds x roles on the page (run.json keeps every one)
OFF_WORDS = frozenset({"off", "0", "false", "no", "n", "disabled", "disable", "none"})
ON_WORDS = frozenset({"on", "1", "true", "yes", "y", "enabled", "enable"})

# a hunt's verdict (the run's first finding) is decided by the search's posterior and its checks, not Holm
HUNT_RULE = "The hunt's verdict rests on its posterior and checks (its own rule, on the hunt's page), not on Holm"
UNFINISHED = frozenset({"running", "interrupted", "stale"})  # cut off or going on (stale: store.liveness)

# Full records for the rows the page shows in detail (failures, drill-down), in the same order.
RecordLoader = Callable[[Sequence[TrialRow]], Sequence[TrialRecord]]


def with_served(report: Report, found: Served) -> Report:
    """The report with what served each trial (from the records, or a scan of the journal)."""
    pv = report.provenance.model_copy(update={"served": found.groups, "served_texts": found.texts})
    return report.model_copy(update={"provenance": pv})


# ----------------------------------------------------------------------------- entry point


def build_report(
    manifest: RunManifest,
    trials: Sequence[TrialRecord],
    *,
    torn_tail: bool = False,
    drilldown_cap: int = DRILLDOWN_CAP,
    status: str | None = None,
    hunt: HuntView | None = None,
) -> Report:
    """Everything the page shows, computed once. `trials` may hold retries and failures.
    `status`: the run's state where it is not the manifest's (store.liveness.state_of: `stale`);
    `hunt`: a hunt run's answer (report.hunt.view), which is then the run's result."""
    with gc_paused():
        rows = [TrialRow.of(record, index) for index, record in enumerate(trials)]
        report = build_report_from_rows(
            manifest,
            rows,
            lambda chosen: [trials[r.source] for r in chosen],
            torn_tail=torn_tail,
            drilldown_cap=drilldown_cap,
            status=status,
            hunt=hunt,
        )
        return with_served(report, served(((t.trial, t.provenance) for t in trials), manifest.redactor))


def build_report_from_rows(
    manifest: RunManifest,
    rows: Sequence[TrialRow],
    load: RecordLoader,
    *,
    torn_tail: bool = False,
    drilldown_cap: int = DRILLDOWN_CAP,
    status: str | None = None,
    hunt: HuntView | None = None,
) -> Report:
    """build_report from compact rows (journal.read_trial_rows): the numbers need only these, so
    a 100,000-trial run never holds 100,000 full records; `load` fetches the full records of
    the few rows shown in detail (at most FAILURE_CAP failures and `drilldown_cap` trials)."""
    with gc_paused():
        return _build(manifest, rows, load, torn_tail=torn_tail, drilldown_cap=drilldown_cap, status=status, hunt=hunt)


def _build(
    manifest: RunManifest,
    rows: Sequence[TrialRow],
    load: RecordLoader,
    *,
    torn_tail: bool,
    drilldown_cap: int,
    status: str | None = None,
    hunt: HuntView | None = None,
) -> Report:
    data = completed_rows(rows)  # each trial's completed record: the rule every reader shares
    frame = _metric_frame(data, manifest.metrics)
    by_metric = {m: MetricRows(frame[frame.metric == m]) for m in manifest.metrics}  # split once
    cell_ids, levels_of = _cells(manifest, rows)
    baseline_cell = _baseline_cell(manifest, levels_of)
    failed = [t for t in rows if t.status != "completed"]
    cells = _cell_views(manifest, cell_ids, levels_of, baseline_cell, data, failed, by_metric)
    cells = _with_missing(cells, data, failed, by_metric)
    primary = family.primary_metric(manifest.metrics)
    effects, interactions = _effects(manifest, cells, by_metric)
    number_effects = _number_effects(manifest, by_metric, levels_of)
    high = _highest_measured(manifest, cells, primary)
    neighbours = _neighbour_tests(manifest, cells, primary, high, by_metric)
    cells, effects, interactions, neighbours = _stopped_corrected(
        manifest, cells, effects, interactions, neighbours, high, by_metric
    )
    state = status or manifest.status
    untested = _untested(manifest, by_metric, state)
    design = _design(manifest, cells, baseline_cell, untested, high)
    members, left_out = family.members(design), family.sizes(family.unreachable(design))
    cells, effects, interactions, number_effects, neighbours, keys = _apply_policy(
        members, cells, effects, interactions, number_effects, neighbours
    )
    tests = family.sizes(keys)
    # every table mark of a finding carries the headline's caution (report.missing's one rule)
    effects, interactions = missing.marked(effects, cells), missing.marked(interactions, cells)
    number_effects = missing.marked(number_effects, cells)
    neighbours = missing.marked_neighbours(neighbours, cells, None if high is None else high.cell)
    cells = missing.marked_cells(cells, baseline_cell)
    failures, shown = _load_shown(load, failed[:FAILURE_CAP], _drilldown(rows, drilldown_cap))
    report = Report(
        run_id=manifest.run_id,
        name=manifest.name,
        description=manifest.description,
        status=state,
        started=manifest.started,
        ended=manifest.ended,
        confidence=stats.CONFIDENCE,
        alpha=stats.ALPHA,
        metrics=dict(manifest.metrics),
        units=dict(manifest.metric_units),
        primary_metric=primary,
        factors={f: list(v) for f, v in manifest.factors.items()},
        baseline=dict(manifest.baseline),
        baseline_cell=baseline_cell,
        planned=manifest.planned_total,
        completed=len(data),
        failed=len(failed),
        cells=cells,
        effects=effects,
        interactions=interactions,
        number_effects=number_effects,
        neighbours=neighbours,
        policy=_policy(keys, cells, hunt, left_out),
        tests=tests,
        unreachable=left_out,
        headline=[],
        drift=_drift(manifest, baseline_cell, by_metric),
        failures=[_failure_view(t, manifest.redactor) for t in failures],
        failures_total=len(failed),
        trials=[_trial_view(t, manifest.redactor) for t in shown],
        trials_total=len(rows),
        torn_tail=torn_tail,
        provenance=_provenance(manifest),
        server=server_table(data),
        gates=list(manifest.gates),
        comparison={m: _comparison(by_metric[m].dispersion, untested.get(m)) for m in _proportions(manifest)},
        dispersion=_estimated_phi(manifest, by_metric),
        untested=untested,
        hunt=hunt,
    )
    return report.model_copy(update={"headline": headline(report, failed)})


def _stopped_corrected(
    manifest: RunManifest,
    cells: list[CellView],
    effects: list[EffectView],
    interactions: list[InteractionView],
    neighbours: list[NeighbourView],
    high: CellView | None,
    by_metric: Mapping[str, MetricRows],
) -> tuple[list[CellView], list[EffectView], list[InteractionView], list[NeighbourView]]:
    """The tests that compare a cell an adaptive rule stopped early: anytime-valid too (report.stopped)."""
    primary = family.primary_metric(manifest.metrics)
    for metric in _proportions(manifest):
        top = high.cell if high is not None and metric == primary else None
        cells, effects, interactions, neighbours = stopped.corrected(
            metric, cells, by_metric[metric].dispersion, effects, interactions, neighbours, top
        )
    return cells, effects, interactions, neighbours


def _policy(
    keys: Sequence[family.TestKey], cells: Sequence[CellView], hunt: HuntView | None, left_out: Mapping[str, int]
) -> str:
    """The multiplicity policy's sentence over the family's tests (naming only the kinds it holds),
    the tests left out of it because they could never be significant (core.family.unreachable),
    with the reading of tests that compare a cell an adaptive rule stopped early (report.stopped)
    where the run has one."""
    if not keys:
        return ""
    policy = findings.policy_sentence(family.sizes(keys), lead=HUNT_RULE if hunt else "", parts=family.parts(keys))
    policy += _left_out_text(left_out)
    if any(p.stopped for c in cells for p in c.proportions.values()):
        policy += " " + stopped.POLICY
    return policy


def _left_out_text(left_out: Mapping[str, int]) -> str:
    """The family's exclusions, said once where its size is: 'Not counted: 14 comparisons with the
    baseline (wall: 7, anomalies: 7), which with their trials could not reach significance ...'."""
    total = sum(left_out.values())
    if not total:
        return ""
    sizes = ", ".join(f"{metric}: {n}" for metric, n in left_out.items())
    return (
        f" Not counted: {counted(total, 'comparison')} with the baseline ({sizes}), which with the trials each side "
        f"has could not reach significance (Mann-Whitney's smallest possible p, ties included, is at least "
        f"{stats.ALPHA:g}): no step of Holm could call them a finding."
    )


def _proportions(manifest: RunManifest) -> list[str]:
    return [m for m, kind in manifest.metrics.items() if kind == "proportion"]


def _untested(manifest: RunManifest, by_metric: Mapping[str, MetricRows], status: str) -> dict[str, str]:
    """Per proportion metric with no residual df for trial-to-trial variation: why none of its
    comparisons is tested. Why: a cell's sum of trials varies with the restarts, not only with the
    sessions, and one trial per cell leaves nothing to measure that by; Fisher's test on the pooled
    sessions then called noise a finding in 16-55% of A/A 2x2x2 reports at intra-trial correlation
    0.02-0.05 (1% at 0). So such a metric's numbers are shown, described, and never called findings."""
    per_cell = max(Counter(t.cell for t in manifest.plan).values(), default=1)
    unfinished = status in UNFINISHED
    return {
        m: by_metric[m].dispersion.untested_reason(per_cell, unfinished=unfinished)
        for m in _proportions(manifest)
        if _no_spread_to_test(by_metric[m])
    }


def _no_spread_to_test(rows: MetricRows) -> bool:
    """No df for trial-to-trial variation, and something to test: one trial per cell, or cells whose
    rates differ (replicated cells that all saw no event, or only events, differ in nothing)."""
    disp = rows.dispersion
    if rows.empty or disp.estimable:
        return False
    rates = {int(c.k.sum()) / int(c.n.sum()) for c in rows.cells.values() if c.n.sum()}
    return disp.most_trials < 2 or len(rates) > 1


def _comparison(disp: clustered.Dispersion, untested: str | None) -> str:
    """The method sentence of one proportion metric: the test, or that there is none (why: the
    sentence after it, report.untested, says it once; the page said it twice in a row)."""
    if untested is None:
        return disp.method()
    return f"not at all: no test, so no finding; differences are descriptive only; {disp.interval_note()}"


def _load_shown(
    load: RecordLoader, failures: Sequence[TrialRow], shown: Sequence[TrialRow]
) -> tuple[list[TrialRecord], list[TrialRecord]]:
    """One load for both lists (a failure is often in the drill-down too)."""
    wanted = {row.source: row for row in (*failures, *shown)}
    rows = sorted(wanted.values(), key=lambda row: row.source)  # one pass through the file
    full = dict(zip((row.source for row in rows), load(rows), strict=True))
    return [full[row.source] for row in failures], [full[row.source] for row in shown]


# ----------------------------------------------------------------------------- data


def _metric_frame(data: Sequence[TrialRow], kinds: Mapping[str, MetricKind]) -> pd.DataFrame:
    """One row per (completed trial, metric): trial, round, cell, metric, k, n, value."""
    rows = []
    for row in data:
        for name, own_kind, k, n, value in row.metrics:
            kind = kinds.get(name, own_kind)
            if kind == "proportion" and n:
                rows.append((row.trial, row.round, row.cell, name, k or 0, n, math.nan))
            elif kind == "number" and value is not None and math.isfinite(value):
                rows.append((row.trial, row.round, row.cell, name, 0, 0, float(value)))
    # columns by transposing in C: DataFrame.from_records spends seconds on 300,000 tuples
    columns = list(zip(*rows, strict=True)) if rows else [()] * 7
    dtypes: tuple[npt.DTypeLike, ...] = ("int64", "int64", object, object, "int64", "int64", "float64")
    names = ("trial", "round", "cell", "metric", "k", "n", "value")
    return pd.DataFrame(
        {name: np.array(col, dtype=dtype) for name, col, dtype in zip(names, columns, dtypes, strict=True)}
    )


def _cells(manifest: RunManifest, trials: Sequence[TrialRow]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """Cell ids and their levels: a matrix's in the design's order, baseline first (the plan's is
    the randomized run order: each run's tables moved their rows and columns, the baseline's
    anywhere); a hunt's in the order it tried them (its plan's wave, then the search's picks)."""
    levels_of: dict[str, dict[str, str]] = {}
    for planned in manifest.plan:
        levels_of.setdefault(planned.cell, dict(planned.levels))
    for record in trials:
        levels_of.setdefault(record.cell, dict(record.levels))
    if manifest.hunt:
        return list(levels_of), levels_of
    return sorted(levels_of, key=lambda cell: _design_position(manifest, levels_of[cell])), levels_of


def _design_position(manifest: RunManifest, levels: Mapping[str, str]) -> tuple[bool, tuple[int, ...]]:
    """Where a cell stands in the design: the baseline first, then by each factor's level in the
    order the matrix declares them (a level it does not declare last)."""
    position = tuple(
        names.index(levels[f]) if levels.get(f) in names else len(names) for f, names in manifest.factors.items()
    )
    return dict(levels) != dict(manifest.baseline), position


def _baseline_cell(manifest: RunManifest, levels_of: Mapping[str, dict[str, str]]) -> str | None:
    for planned in manifest.plan:
        if planned.is_baseline:
            return planned.cell
    for cell, levels in levels_of.items():
        if levels == dict(manifest.baseline):
            return cell
    return None


# ----------------------------------------------------------------------------- cells


def _cell_views(
    manifest: RunManifest,
    cell_ids: Sequence[str],
    levels_of: Mapping[str, dict[str, str]],
    baseline_cell: str | None,
    data: Sequence[TrialRow],
    failed: Sequence[TrialRow],
    by_metric: Mapping[str, MetricRows],
) -> list[CellView]:
    planned = _count(p.cell for p in manifest.plan)  # a hunt's plan is its first wave: no cell's total
    completed = _count(t.cell for t in data)
    failed_by_cell = _count(t.cell for t in failed)
    stopped = stopped_cells(manifest, completed, planned)
    proportions = {
        name: _proportion_cells(by_metric[name], cell_ids, baseline_cell, stopped)
        for name, kind in manifest.metrics.items()
        if kind == "proportion"
    }
    numbers = {
        name: _number_cells(by_metric[name], cell_ids, baseline_cell)
        for name, kind in manifest.metrics.items()
        if kind == "number"
    }
    return [
        CellView(
            cell=cell,
            levels=levels_of[cell],
            is_baseline=cell == baseline_cell,
            planned=None if manifest.hunt else planned.get(cell, 0),
            completed=completed.get(cell, 0),
            failed=failed_by_cell.get(cell, 0),
            proportions={m: by_cell[cell] for m, by_cell in proportions.items()},
            numbers={m: by_cell[cell] for m, by_cell in numbers.items()},
        )
        for cell in cell_ids
    ]


def stopped_cells(
    manifest: RunManifest, completed: Mapping[str, int], planned: Mapping[str, int] | None = None
) -> set[str]:
    """The cells of an adaptive run that completed fewer trials than planned: a rule stopped them on
    their data (the baseline with them), or they were cut short. Their rates take the anytime-valid
    interval (clustered.cell_rate's stopped_rate), which holds at any stop; a fixed-sample one would
    not. The one rule: the report, orch compare and summary.json's series (the runs index) ask it.
    `completed`: cell -> its completed trials; `planned`: the plan's count, when already made."""
    if not manifest.adaptive or manifest.hunt:
        return set()
    planned = _count(p.cell for p in manifest.plan) if planned is None else planned
    return {cell for cell, count in planned.items() if completed.get(cell, 0) < count}


def _with_missing(
    cells: Sequence[CellView], data: Sequence[TrialRow], failed: Sequence[TrialRow], by_metric: Mapping[str, MetricRows]
) -> list[CellView]:
    """The cells with their finished trials (completed, or failed for good: store.runtrials' rule) and,
    per metric, how many of those have no value (report.missing): what the Cells table and every
    finding comparing them tell. Only a run with failures looks at its completed rows again."""
    ended = {t.trial: t.cell for t in failed if t.status == "failed" and not t.retried}
    if ended:
        for t in data:
            ended.pop(t.trial, None)  # failed, then completed on a retry: data
    lost = _count(ended.values())
    finished = {c.cell: c.completed + lost.get(c.cell, 0) for c in cells}
    measured = {m: {cell: len(group) for cell, group in rows.cells.items()} for m, rows in by_metric.items()}
    lacking = missing.without_data(finished, measured)
    return [c.model_copy(update={"ran": finished[c.cell], "missing": lacking[c.cell]}) for c in cells]


def _count(items: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def _proportion_cells(
    metric: MetricRows, cell_ids: Sequence[str], baseline_cell: str | None, stopped: Collection[str] = ()
) -> dict[str, ProportionCell]:
    grouped = metric.cells
    pooled = {cell: _pooled(grouped.get(cell)) for cell in cell_ids}
    base = pooled.get(baseline_cell) if baseline_cell else None
    others = [c for c in cell_ids if c != baseline_cell and base and base[1] and pooled[c][1]]
    disp = metric.dispersion  # with replicates the trial is the unit: quasi-binomial, else Fisher
    # the trials' own counts feed only the sparse rule's test: not gathered for every run
    trials = {cell: _trial_counts(group) for cell, group in grouped.items()} if disp.sparse else {}
    base_trials = trials.get(baseline_cell, []) if baseline_cell else []
    tests = (
        {c: versus_baseline(*pooled[c], *base, disp, trials.get(c, []), base_trials) for c in others} if base else {}
    )
    pvalues = {c: t.p for c, t in tests.items()}
    # untested (no df for trial-to-trial variation): the p stays for the record, no Holm, never significant
    tested = others if disp.estimable else []
    adjusted = dict(zip(tested, stats.holm([pvalues[c] for c in tested]), strict=True))
    noise = _overdispersion(grouped)
    result = {}
    for cell in cell_ids:
        k, n = pooled[cell]
        group = grouped.get(cell)
        diff: float | None = None
        low: float | None = None
        high: float | None = None
        if cell in tests:
            diff, low, high = tests[cell].diff, tests[cell].low, tests[cell].high
        result[cell] = ProportionCell(
            rate=_rate_view(k, n, disp, 0 if group is None else len(group), stopped=cell in stopped),
            stopped=cell in stopped,
            trials=0 if group is None else len(group),
            trial_rates=_trial_rates(group),
            overdispersion_p=noise.get(cell, (None, None))[0],
            overdispersion_p_holm=noise.get(cell, (None, None))[1],
            diff=diff,
            diff_low=low,
            diff_high=high,
            p=pvalues.get(cell),
            p_holm=adjusted.get(cell),
            significant=cell in adjusted and adjusted[cell] < stats.ALPHA,
        )
    return result


def _pooled(group: CellRows | None) -> tuple[int, int]:
    if group is None or not len(group):
        return (0, 0)
    return (int(group.k.sum()), int(group.n.sum()))


def _rate_view(
    k: int, n: int, disp: clustered.Dispersion | None = None, trials: int = 0, *, stopped: bool = False
) -> RateView:
    interval = clustered.cell_rate(k, n, disp, trials, stopped=stopped)
    return RateView(k=k, n=n, rate=None if n == 0 else interval.estimate, low=interval.low, high=interval.high)


def _dispersion(rows: pd.DataFrame) -> clustered.Dispersion:
    """Trial-to-trial variation of one proportion metric, pooled over every cell's completed trials:
    the cells' (k, n) lists in the order of their first row, each in row order, as
    groupby("cell", sort=False) gives them (metricrows.by_cell)."""
    return MetricRows(rows).dispersion


def versus_baseline(
    k: int,
    n: int,
    kb: int,
    nb: int,
    disp: clustered.Dispersion,
    cell_trials: Sequence[tuple[int, int]] = (),
    base_trials: Sequence[tuple[int, int]] = (),
) -> clustered.Comparison:
    """A cell vs the baseline: quasi-binomial when trial-to-trial variation can be estimated (its p
    from the trials themselves, core.trialexact, when the dispersion rests on too little: clustered.sparse), else
    today's Fisher test with Newcombe's interval (labelled as assuming independent sessions; past
    stats.FISHER_SESSIONS the binomial test Fisher's converges to, as Fisher's would take minutes)."""
    if disp.estimable:
        found = clustered.compare(k, n, kb, nb, disp)
        if disp.sparse and cell_trials and base_trials:
            return dataclasses.replace(found, p=trialexact.pair_pvalue(cell_trials, base_trials))
        return found
    low, high = stats.rate_difference_ci(k, n, kb, nb)
    return clustered.Comparison(stats.pooled_test(k, n, kb, nb).p, k / n - kb / nb, low, high)


def _trial_counts(group: CellRows | None) -> list[tuple[int, int]]:
    """A cell's completed trials as (k, n), for the trial-level test."""
    if group is None:
        return []
    return group.counts()


def _trial_rates(group: CellRows | None) -> list[float]:
    if group is None:
        return []
    head = group.counts()[:TRIAL_RATES_SHOWN]
    return [float(k / n) for k, n in head]


def _overdispersion(grouped: Mapping[str, CellRows]) -> dict[str, tuple[float, float]]:
    """Per cell whose trials can disagree: (p, Holm p over those cells) of more trial-to-trial
    spread than the binomial, exact given the cell's events (stats.trial_homogeneity). Holm, as
    each cell is a chance of a false alarm: Pearson's chi-square with no correction marked 27% of
    pure-binomial demo runs suspect."""
    raw = {cell: stats.trial_homogeneity(group.counts()) for cell, group in grouped.items() if len(group) >= 2}
    tested = {cell: p for cell, p in raw.items() if p is not None}
    return dict(zip(tested, zip(tested.values(), stats.holm(list(tested.values())), strict=True), strict=True))


def _number_cells(metric: MetricRows, cell_ids: Sequence[str], baseline_cell: str | None) -> dict[str, NumberCell]:
    values = {cell: group.value for cell, group in metric.cells.items()}
    empty = np.array([], dtype=float)
    base = values.get(baseline_cell, empty) if baseline_cell else empty
    others = [c for c in cell_ids if c != baseline_cell and base.size and c in values]
    pvalues = {c: ranks.mann_whitney(values[c], base) for c in others}
    adjusted = dict(zip(others, stats.holm([pvalues[c] for c in others]), strict=True))
    result = {}
    for cell in cell_ids:
        data = values.get(cell, empty)
        interval = ranks.median_interval(data)
        result[cell] = NumberCell(
            n=int(data.size),
            median=_finite(interval.estimate),
            low=interval.low,
            high=interval.high,
            coverage=interval.coverage,
            box=_box(data),
            p=pvalues.get(cell),
            p_holm=adjusted.get(cell),
            significant=adjusted.get(cell, 1.0) < stats.ALPHA,
        )
    return result


def _box(data: np.ndarray) -> BoxStats | None:
    """Five numbers for a box plot (whiskers at 1.5 IQR, as matplotlib draws them)."""
    if data.size == 0:
        return None
    q1, med, q3 = (float(x) for x in np.percentile(data, [25, 50, 75]))
    iqr = q3 - q1
    inside = data[(data >= q1 - 1.5 * iqr) & (data <= q3 + 1.5 * iqr)]
    return BoxStats(whislo=float(inside.min()), q1=q1, med=med, q3=q3, whishi=float(inside.max()))


def _finite(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


# ----------------------------------------------------------------------------- effects, drift


def _effects(
    manifest: RunManifest, cells: Sequence[CellView], by_metric: Mapping[str, MetricRows]
) -> tuple[list[EffectView], list[InteractionView]]:
    """Effects and interactions per proportion metric, under the same dispersion as the cell tests."""
    effects: list[EffectView] = []
    interactions: list[InteractionView] = []
    for metric, kind in manifest.metrics.items():
        if kind != "proportion":
            continue
        counts = [
            stats.CellCount(c.levels, c.proportions[metric].rate.k, c.proportions[metric].rate.n)
            for c in cells
            if c.proportions[metric].rate.n
        ]
        disp = by_metric[metric].dispersion
        found, inter = proportion_views(
            metric, counts, manifest.factors, manifest.baseline, phi=disp.phi, df=disp.df if disp.estimable else 0.0
        )
        effects += found
        interactions += inter
    return effects, interactions


def _number_effects(
    manifest: RunManifest, by_metric: Mapping[str, MetricRows], levels_of: Mapping[str, dict[str, str]]
) -> list[NumberEffectView]:
    """Per factor, a numeric metric's values with the level vs the baseline's level (the canary)."""
    views: list[NumberEffectView] = []
    for metric, kind in manifest.metrics.items():
        rows = by_metric[metric]
        if kind != "number" or rows.empty:
            continue
        cells = [
            findings.CellValues(levels_of.get(cell, {}), tuple(group.value.tolist()))
            for cell, group in rows.cells.items()
        ]
        views += number_views(metric, cells, manifest.factors, manifest.baseline)
    return views


def _highest_measured(manifest: RunManifest, cells: Sequence[CellView], metric: str | None) -> CellView | None:
    """The primary proportion's highest-rate cell among those that measured it (None: none did)."""
    if metric is None or manifest.metrics.get(metric) != "proportion":
        return None
    measured = [c for c in cells if c.proportions[metric].rate.n]
    return _highest(measured, metric) if measured else None


def _neighbour_tests(
    manifest: RunManifest,
    cells: Sequence[CellView],
    metric: str | None,
    high: CellView | None,
    by_metric: Mapping[str, MetricRows],
) -> list[NeighbourView]:
    """The highest cell vs each measured cell one factor away (what its rate needs), by the same
    test as the cells vs the baseline (quasi-binomial with replicates, else Fisher).

    Empty when the highest cell is the baseline: then these are the cell-vs-baseline tests,
    and the report quotes those (one number per comparison, the same in prose and table)."""
    if metric is None or high is None or high.is_baseline:
        return []
    measured = [c for c in cells if c.proportions[metric].rate.n]
    k, n = high.proportions[metric].rate.k, high.proportions[metric].rate.n
    rows = by_metric[metric]
    disp = rows.dispersion
    trials = {cell: group.counts() for cell, group in rows.cells.items()} if disp.sparse else {}
    views = []
    for factor, cell in _one_factor_away(manifest.factors, measured, high):
        rate = cell.proportions[metric].rate
        p = versus_baseline(k, n, rate.k, rate.n, disp, trials.get(high.cell, []), trials.get(cell.cell, [])).p
        level = cell.levels[factor]
        views.append(
            NeighbourView(
                metric=metric,
                cell=cell.cell,
                factor=factor,
                level=level,
                k=rate.k,
                n=rate.n,
                p=p,
                method=method_name(disp),
            )
        )
    return views


def method_name(disp: clustered.Dispersion) -> str:
    """The test versus_baseline runs under `disp`, in a few words, for a table's p column."""
    if not disp.estimable:
        return "Fisher's exact test"
    if disp.sparse:
        return "likelihood ratio on the trials"
    return "quasi-binomial"


def _highest(cells: Sequence[CellView], metric: str) -> CellView:
    """The cell with the highest rate; on a tie the baseline (then plan order), so a tie never
    turns the baseline's own comparisons into a second set of tests."""
    return max(cells, key=lambda c: (c.proportions[metric].rate.rate or 0.0, c.is_baseline))


def _one_factor_away(
    factors: Mapping[str, Sequence[str]], cells: Sequence[CellView], high: CellView
) -> list[tuple[str, CellView]]:
    """family.one_factor_away over the views: the neighbours the family tests are the ones shown."""
    by_id = {c.cell: c for c in cells}
    return [(f, by_id[c]) for f, c in family.one_factor_away(list(factors), _levels(cells), high.cell)]


def _levels(cells: Iterable[CellView]) -> dict[str, Mapping[str, str]]:
    return {c.cell: c.levels for c in cells}


def _design(
    manifest: RunManifest,
    cells: Sequence[CellView],
    baseline: str | None,
    untested: Collection[str],
    high: CellView | None,
) -> family.Design:
    """What this run measured, as core.family reads it: per metric the cells with data, and for a
    number the values (trials) each has, which decide whether a cell's test can be significant."""
    metrics = {
        m: family.MetricDesign(
            kind,
            _levels(c for c in cells if (c.proportions[m].rate.n if kind == "proportion" else c.numbers[m].n)),
            tested=m not in untested,
            trials={c.cell: c.numbers[m].n for c in cells if c.numbers[m].n} if kind == "number" else None,
        )
        for m, kind in manifest.metrics.items()
    }
    return family.Design(manifest.factors, manifest.baseline, baseline, metrics, None if high is None else high.cell)


def _apply_policy(
    members: Sequence[family.TestKey],
    cells: Sequence[CellView],
    effects: Sequence[EffectView],
    interactions: Sequence[InteractionView],
    number_effects: Sequence[NumberEffectView],
    neighbours: Sequence[NeighbourView],
) -> tuple[
    list[CellView],
    list[EffectView],
    list[InteractionView],
    list[NumberEffectView],
    list[NeighbourView],
    list[family.TestKey],
]:
    """One policy for the whole report: Holm over every test it could call a finding, every metric
    in one family: the `members` core.family finds in what the run measured (`orch plan` states
    the size of the same function's family before the sweep). Sets p_holm, and significant /
    finding from it. A test outside the family (an untested metric's) cannot be a finding. Returns
    the family's tests (keys) last."""
    pvalues = _pvalues(cells, effects, interactions, number_effects, neighbours)
    tested = {key: pvalues[key] for key in members if key in pvalues}
    adjusted = findings.adjust(tested)  # one family across metrics: any false finding anywhere <= alpha
    new_cells = [
        c.model_copy(
            update={
                "proportions": {
                    m: _significance(v, adjusted.get(("rate", m, c.cell))) for m, v in c.proportions.items()
                },
                "numbers": {m: _number_significance(v, ("number", m, c.cell), adjusted) for m, v in c.numbers.items()},
            }
        )
        for c in cells
    ]
    return (
        new_cells,
        _holm_items(effects, adjusted),
        _holm_items(interactions, adjusted),
        _holm_items(number_effects, adjusted),
        _holm_items(neighbours, adjusted),
        list(tested),
    )


_Tested = TypeVar("_Tested", EffectView, InteractionView, NumberEffectView, NeighbourView)


def _key(item: EffectView | InteractionView | NumberEffectView | NeighbourView) -> family.TestKey:
    """A view's test as core.family keys it."""
    if isinstance(item, EffectView):
        return "contrast", item.metric, (((item.factor, item.reference, item.level),), tuple(item.given.items()))
    if isinstance(item, InteractionView):
        return "contrast", item.metric, (tuple(zip(item.factors, item.references, item.levels, strict=True)), ())
    if isinstance(item, NumberEffectView):
        return "number_effect", item.metric, (item.factor, item.level)
    return "neighbour", item.metric, item.cell


def _pvalues(
    cells: Sequence[CellView],
    effects: Sequence[EffectView],
    interactions: Sequence[InteractionView],
    number_effects: Sequence[NumberEffectView],
    neighbours: Sequence[NeighbourView],
) -> dict[family.TestKey, float]:
    """Every test's raw p, keyed as core.family keys the family."""
    found: dict[family.TestKey, float] = {}
    for c in cells:
        found.update({("rate", m, c.cell): v.p for m, v in c.proportions.items() if v.p is not None})
        found.update({("number", m, c.cell): v.p for m, v in c.numbers.items() if v.p is not None})
    for items in (effects, interactions, number_effects, neighbours):
        found.update({_key(item): item.p for item in items})
    return found


def _holm_items(items: Sequence[_Tested], adjusted: Mapping[family.TestKey, float]) -> list[_Tested]:
    """The views with their family-wise p and whether that makes them a finding; one outside the
    family (an untested metric's) keeps p_holm 1.0 and is no finding."""
    return [
        item.model_copy(
            update={"p_holm": adjusted.get(_key(item), 1.0), "finding": findings.is_finding(adjusted.get(_key(item)))}
        )
        for item in items
    ]


def _significance(view: ProportionCell | NumberCell, p_holm: float | None) -> ProportionCell | NumberCell:
    if p_holm is None:
        return view
    return view.model_copy(update={"p_holm": p_holm, "significant": findings.is_finding(p_holm)})


def _number_significance(view: NumberCell, key: family.TestKey, adjusted: Mapping[family.TestKey, float]) -> NumberCell:
    """A numeric cell's family-wise p; a test with a p outside the family (core.family.unreachable:
    it could never be significant) has none, and is no finding: the per-metric Holm p the cell was
    built with would read as a correction the report did not make."""
    if key in adjusted or view.p is None:
        return cast(NumberCell, _significance(view, adjusted.get(key)))
    return view.model_copy(update={"p_holm": None, "significant": False})


def _drift(manifest: RunManifest, baseline_cell: str | None, by_metric: Mapping[str, MetricRows]) -> list[DriftView]:
    """Per proportion metric: the baseline's rate per round, homogeneity and trend tests against
    the trials' own spread (a round of the baseline is a trial: see _round_spread)."""
    if baseline_cell is None:
        return []
    views = []
    for metric, kind in manifest.metrics.items():
        base = by_metric[metric].cells.get(baseline_cell)
        if kind != "proportion" or base is None:
            continue
        rounds = [stats.RoundCount(r, k, n) for r, k, n in _per_round(base)]
        spread, assumed = _round_spread(by_metric[metric])
        check = stats.drift_check(rounds, spread=spread)
        views.append(
            DriftView(
                metric=metric,
                cell=baseline_cell,
                rounds=[RoundRate(round=r.round, k=r.k, n=r.n, rate=r.k / r.n) for r in check.rounds],
                p_homogeneity=check.p_homogeneity,
                p_trend=check.p_trend,
                flagged=check.flagged,
                assumed=assumed,
            )
        )
    return views


def _per_round(cell: CellRows) -> list[tuple[int, int, int]]:
    """(round, k, n) summed over the cell's trials of each round, by round."""
    rounds, index = np.unique(cell.round, return_inverse=True)
    k = np.zeros(rounds.size, dtype=np.int64)
    n = np.zeros(rounds.size, dtype=np.int64)
    np.add.at(k, index, cell.k)
    np.add.at(n, index, cell.n)
    return list(zip(rounds.tolist(), k.tolist(), n.tolist(), strict=True))


def _round_table(metric: MetricRows) -> tuple[np.ndarray, np.ndarray]:
    """k and n summed by cell (rows, sorted) and round (columns, sorted), 0 where a cell has no
    trial in a round: what groupby(["cell", "round"]).sum().unstack(fill_value=0) gives."""
    cells = [metric.cells[c] for c in sorted(metric.cells)]
    if not cells:
        return np.zeros((0, 0)), np.zeros((0, 0))
    row = np.concatenate([np.full(len(c), i) for i, c in enumerate(cells)])
    rounds, column = np.unique(np.concatenate([c.round for c in cells]), return_inverse=True)
    k = np.zeros((len(cells), rounds.size))
    n = np.zeros((len(cells), rounds.size))
    np.add.at(k, (row, column), np.concatenate([c.k for c in cells]))
    np.add.at(n, (row, column), np.concatenate([c.n for c in cells]))
    return k, n


def _round_spread(metric: MetricRows) -> tuple[tuple[float, float], bool]:
    """(phi, df) of one metric's trials by cell and round (clustered.round_dispersion): every cell
    of the sweep informs it, so a drift check has trial-to-trial variation to be tested against.
    Where nothing estimates it (only the baseline saw events, or one round), the least design
    effect orch assumes for the mean trial, taken as known, and True: a drift check on sessions
    as if independent would call any restart-to-restart spread drift, and no check at all would
    hide a real one."""
    phi, df = clustered.round_dispersion(*_round_table(metric))
    if df > 0:
        return (phi, df), False
    sizes = np.concatenate([cell.n for cell in metric.cells.values()])  # exact int sums: order-free
    sizes = sizes[sizes > 0]
    return (clustered.prior_inflation(float(sizes.mean()) if sizes.size else 0.0), math.inf), True


# ----------------------------------------------------------------------------- headline


def headline(report: Report, failed: Sequence[TrialRow | TrialRecord] = ()) -> list[Finding]:
    """Plain sentences with numbers, most important first: the status, then each flag changed
    alone from the baseline, then the highest cell and what it needs, interactions, numbers.
    A hunt's are its verdict and answer instead: its configurations are the search's choices,
    not a design the cells' comparisons answer ("no significant difference between any cell
    and the baseline" was said of a hunt that found its three culprits)."""
    if report.hunt is not None:
        return _hunt_findings(report.hunt) + _status_findings(report) + _failure_findings(report, failed)
    found = _status_findings(report)
    metric = report.primary_metric
    if metric and report.metrics.get(metric) == "proportion":
        found += _single_flag_findings(report, metric)
        found += _outcome_findings(report, metric)
        found += _interaction_findings(report, metric)
        found += _noise_findings(report, metric)
    found += _number_effect_findings(report, metric)
    found += _moved_findings(report, metric)
    found += _drift_findings(report)
    found += _failure_findings(report, failed)
    return found


def _hunt_findings(hunt: HuntView) -> list[Finding]:
    """The hunt's verdict (a finding only when it found its answer), then its lines."""
    head = Finding(kind="finding" if hunt.found else "caution", text=hunt.verdict)
    return [head, *(Finding(kind="info", text=line.strip()) for line in hunt.lines)]


def _single_flag_findings(report: Report, metric: str) -> list[Finding]:
    """The headline opens with the simplest question: each flag changed alone from the baseline.

    These are the cells one factor away from the baseline, with the table's own numbers (its
    Holm p, its significance), so the sentence and the Cells table can never disagree."""
    base = _cell(report, report.baseline_cell)
    if base is None or not base.proportions[metric].rate.n:
        return []
    measured = [c for c in report.cells if c.proportions[metric].rate.n]
    singles = _one_factor_away(report.factors, measured, base)
    if not singles:
        return []
    if metric in report.untested:
        return [_untested_single_flags(report, metric, base, singles)]
    parts, moved, compared = [], 0, [base]
    for factor, cell in singles:
        p = cell.proportions[metric]
        moved += p.significant
        compared += [cell] if p.significant else []
        verdict = "significant" if p.significant else "not significant"
        parts.append(f"{_change(factor, cell.levels[factor])} gives {fmt_rate(p.rate)} ({fmt_p(p.p_holm)}, {verdict})")
    # a change alone whose cell has no data is named, and the tail speaks only of those compared
    unmeasured = [
        f"{_change(f, c.levels[f])}: no data (no trial completed with {metric})"
        for f, c in _one_factor_away(report.factors, report.cells, base)
        if not c.proportions[metric].rate.n
    ]
    of = f" of the {len(singles)} compared" if unmeasured else ""
    parts += unmeasured
    tail = (
        f"{moved} of {len(singles)} single-flag changes{' compared' if unmeasured else ''} differ from the baseline"
        if moved
        else f"no single-flag change{of} differs significantly from the baseline"
    )
    return [
        Finding(
            kind="finding" if moved else "info",
            text=(
                f"{metric.capitalize()} is {fmt_rate(base.proportions[metric].rate)} in the baseline "
                f"({fmt_levels(base.levels)}). One flag at a time: {'; '.join(parts)}; {tail} (Holm)."
                + (missing.clause(metric, compared) if moved else "")
            ),
        )
    ]


def _untested_single_flags(
    report: Report, metric: str, base: CellView, singles: Sequence[tuple[str, CellView]]
) -> Finding:
    """The single-flag opener of an untested metric: the rates only, and that nothing is tested (why:
    the metric's result line, which follows it and is the run's result on the index and in webhooks;
    the headline said the same reason twice in a row)."""
    parts = [f"{_change(f, c.levels[f])} gives {fmt_rate(c.proportions[metric].rate)}" for f, c in singles]
    return Finding(
        kind="info",
        text=(
            f"{metric.capitalize()} is {fmt_rate(base.proportions[metric].rate)} in the baseline "
            f"({fmt_levels(base.levels)}). One flag at a time: {'; '.join(parts)}; not tested, so not findings "
            "(why: below)."
        ),
    )


def _status_findings(report: Report) -> list[Finding]:
    found = []
    if report.completed == 0:
        found.append(
            Finding(
                kind="caution",
                text="No trial completed: there is no data yet, so nothing can be said about any factor.",
            )
        )
    if report.status != "completed":
        found.append(Finding(kind="caution", text=status_sentence(report)))
    if report.torn_tail:
        found.append(
            Finding(
                kind="info",
                text="The journal's last line was torn (the controller stopped mid-write); that record was dropped.",
            )
        )
    return found


def status_sentence(report: Report) -> str:
    """How far a run that did not complete got, in the words every view of it uses."""
    done = completed_of(report.completed, report.planned)
    if report.status == "stale":
        return (
            f"The run stopped without ending: its controller is gone (killed or crashed), with {done}; "
            "conclusions cover only those (`orch resume` continues it, `orch restore` puts its hosts back)."
        )
    if report.status == "interrupted":  # goes on as a stale one does (its hosts are back already)
        return f"The run is interrupted: {done}; conclusions cover only those (`orch resume` continues it)."
    said = "The run failed" if report.status == "failed" else f"The run is {report.status}"  # never "is failed"
    return f"{said}: {done}; conclusions cover only those."


def _outcome_findings(report: Report, metric: str) -> list[Finding]:
    measured = [c for c in report.cells if c.proportions[metric].rate.n]
    base = _cell(report, report.baseline_cell)
    if not measured or base is None or not base.proportions[metric].rate.n:
        if measured:
            return [
                Finding(
                    kind="caution",
                    text=f"The baseline cell has no completed {metric} data, so no cell can be compared with it.",
                )
            ]
        return []
    if metric in report.untested:
        return [_untested_finding(report, metric, measured, base)]
    significant = [c for c in measured if c.proportions[metric].significant]
    if not significant:
        return [_null_finding(report, metric, measured, base)]
    high = _highest(measured, metric)
    if not (high.is_baseline or high.proportions[metric].significant):
        return _unsurviving_high(report, metric, high, base, significant)
    findings = [_difference_finding(report, metric, high, base, significant)]
    cause = _cause_finding(report, metric, high)
    return findings + ([cause] if cause else [])


def _unsurviving_high(
    report: Report, metric: str, high: CellView, base: CellView, significant: Sequence[CellView]
) -> list[Finding]:
    """The highest cell did not survive Holm (few sessions, say), so the finding is about the
    highest cell that did, and the highest one is told as info. What the highest cell needs is
    not told: its one-factor tests (report.neighbours) belong to a cell not shown to differ."""
    top = _highest(significant, metric)
    p = high.proportions[metric]
    note = Finding(
        kind="info",
        text=(
            f"The highest {metric}, {fmt_rate(p.rate)} in cell {fmt_levels(high.levels)}, does not differ "
            f"significantly from the baseline's {fmt_rate(base.proportions[metric].rate)} "
            f"({fmt_p(p.p_holm)}, Holm): too few sessions, or too small a difference, to call it a finding."
        ),
    )
    return [_difference_finding(report, metric, top, base, significant), note]


def _difference_finding(
    report: Report, metric: str, high: CellView, base: CellView, significant: Sequence[CellView]
) -> Finding:
    name = metric.capitalize()
    if high.is_baseline:
        low = min(significant, key=lambda c: c.proportions[metric].rate.rate or 0.0)
        p = low.proportions[metric]
        return Finding(
            kind="finding",
            text=(
                f"{name} is {fmt_rate(base.proportions[metric].rate)} in the baseline "
                f"({fmt_levels(base.levels)}) vs {fmt_rate(p.rate)} in cell {fmt_levels(low.levels)} "
                f"({fmt_p(p.p_holm)}, Holm); {_of_compared(report, metric, len(significant))} "
                f"differ significantly from the baseline{_unmeasured(report, metric)}."
                + missing.clause(metric, [base, *significant])
            ),
        )
    p = high.proportions[metric]
    return Finding(
        kind="finding",
        text=(
            f"{name} is {fmt_rate(p.rate)} in cell {fmt_levels(high.levels)} vs "
            f"{fmt_rate(base.proportions[metric].rate)} in the baseline ({fmt_p(p.p_holm)}, Holm); "
            f"{_of_compared(report, metric, len(significant))} differ significantly from the "
            f"baseline{_unmeasured(report, metric)}." + missing.clause(metric, [high, base, *significant])
        ),
    )


def _cause_finding(report: Report, metric: str, high: CellView) -> Finding | None:
    """Which of the high cell's levels are needed: change one at a time, does it go away?

    Each comparison is quoted with the number the page shows for it: the Cells table's Holm p
    when the high cell is the baseline, else the one-factor table's (report.neighbours)."""
    tested = _cause_tests(report, metric, high)
    if not tested:
        return None
    needed = [(f, c, p) for f, c, p, sig in tested if sig]
    not_needed = [(f, c, p) for f, c, p, sig in tested if not sig]
    text = _needed_text(report, metric, high, needed) + _not_needed_text(metric, high, not_needed)
    kind: FindingKind = "finding" if needed else "info"  # a finding only if a comparison it names survived Holm
    if needed:
        text = text.rstrip() + missing.clause(metric, [high, *(c for _, c, _ in needed)])
    return Finding(kind=kind, text=text.strip()) if text.strip() else None


def _cause_tests(report: Report, metric: str, high: CellView) -> list[tuple[str, CellView, float, bool]]:
    """(factor, neighbour cell, Holm p, significant) for each cell one factor away from `high`."""
    if high.is_baseline:
        measured = [c for c in report.cells if c.proportions[metric].rate.n]
        return [
            (f, c, _p_or_one(c.proportions[metric].p_holm), c.proportions[metric].significant)
            for f, c in _one_factor_away(report.factors, measured, high)
        ]
    by_id = {c.cell: c for c in report.cells}
    return [(nb.factor, by_id[nb.cell], nb.p_holm, nb.finding) for nb in report.neighbours if nb.metric == metric]


def _needed_text(report: Report, metric: str, high: CellView, needed: Sequence[tuple[str, CellView, float]]) -> str:
    """What each surviving one-factor drop from the high cell shows.

    One factor: "It needs x=on: turning off x takes it to at most ...". Several: each drop lowering
    the rate is what an AND of the flags gives, but also an OR (either flag alone gives it) or a
    sum of their effects. "It needs them together" is said only with the evidence of the AND the
    report already tests: their interaction (of exactly those factors, one set of levels) is a
    finding after Holm, with the sign an AND has at the high cell (_and_interaction). Otherwise
    the sentence says only what was shown: turning off any one of them lowers it."""
    if not needed:
        return ""
    worst = max(needed, key=lambda item: item[1].proportions[metric].rate.rate or 0.0)
    top = worst[1].proportions[metric].rate
    names = _join([f"{f}={high.levels[f]}" for f, _, _ in needed])
    changes = [_change(f, c.levels[f]) for f, c, _ in needed]
    pvalues = ", ".join(f"{fmt_p(p)} for {f}" for f, _, p in needed)
    limit = f"at most {fmt_pct(top.rate)} (95% upper limit {fmt_pct(top.high)}; vs that cell {pvalues}, Holm"
    if len(needed) == 1:
        return f"It needs {names}: {changes[0]} takes it to {limit}). "
    offs = all(ch.startswith("turning off") for ch in changes)
    anyone = "turning off any one of them" if offs else f"changing any one of them ({'; '.join(changes)})"
    inter = _and_interaction(report, metric, high, needed)
    if inter is not None:
        return (
            f"It needs {names} together: {anyone} takes it to {limit}; their {inter.order}-way interaction "
            f"{fmt_pts(inter)}, {fmt_p(inter.p_holm)}, Holm). "
        )
    subject = f"Turning off any one of {names}" if offs else f"Changing any one of {names} ({'; '.join(changes)})"
    why = (
        "their interaction is not a finding: each alone, or their effects added, would also give these drops"
        if _corners_low(report, metric, high, needed)
        else "cells with two or more of them changed are not all as low, as they would be if it needed them together"
    )
    return f"{subject} lowers it, to {limit}); that it needs them together is not shown ({why}). "


def _and_interaction(
    report: Report, metric: str, high: CellView, needed: Sequence[tuple[str, CellView, float]]
) -> InteractionView | None:
    """The interaction finding that shows an AND of the needed factors at the high cell, if any.

    An AND (the rate only where all are at the high cell's levels) makes the k-th difference
    sum over corners (-1)^(k - changed) p(corner) equal to (-1)^(k - changed at the high cell)
    times the high rate: so the interaction of exactly these factors, between the high cell's
    level and the neighbour's, must be a finding of that sign. An OR or a sum has it near 0 or
    of the other sign. A factor with several needed levels matches no single interaction. A parity
    (the rate where an odd number of the flags is on) has that sign too, yet turning off two of them
    brings the rate back: so every corner with two or more of them changed must also be low (its
    observed rate within the one-flag drops' highest 95% upper limit), or no AND is told."""
    factors = {f for f, _, _ in needed}
    if len(factors) != len(needed) or not _corners_low(report, metric, high, needed):
        return None
    for inter in report.interactions:
        if inter.metric != metric or not inter.finding or set(inter.factors) != factors:
            continue
        pairs = {f: {r, lv} for f, r, lv in zip(inter.factors, inter.references, inter.levels, strict=True)}
        if any(pairs[f] != {high.levels[f], c.levels[f]} for f, c, _ in needed):
            continue
        changed = sum(high.levels[f] == lv for f, lv in zip(inter.factors, inter.levels, strict=True))
        if inter.estimate * (-1) ** (inter.order - changed) > 0:
            return inter
    return None


def _corners_low(report: Report, metric: str, high: CellView, needed: Sequence[tuple[str, CellView, float]]) -> bool:
    """Every cell that changes two or more of the needed factors from the high cell to their dropped
    levels (the rest as in the high cell) was measured, and its rate is no higher than the highest 95%
    upper limit of the one-flag drops: what an AND gives, and a parity does not."""
    dropped = {f: c.levels[f] for f, c, _ in needed}
    ceiling = max(c.proportions[metric].rate.high for _, c, _ in needed)
    for cell in report.cells:
        moved = [f for f in dropped if cell.levels.get(f) == dropped[f]]
        others_same = all(cell.levels.get(f) == v for f, v in high.levels.items() if f not in dropped)
        if (
            not others_same
            or len(moved) < 2
            or any(cell.levels.get(f) not in (high.levels[f], dropped[f]) for f in dropped)
        ):
            continue
        rate = cell.proportions[metric].rate
        if rate.rate is None or rate.rate > ceiling:
            return False
    return True


def _not_needed_text(metric: str, high: CellView, rest: Sequence[tuple[str, CellView, float]]) -> str:
    parts = [
        f"{_change(f, c.levels[f])} leaves it at {fmt_rate(c.proportions[metric].rate)} "
        f"({fmt_p(p)}, not significantly lower)"
        for f, c, p in rest
    ]
    text = "; ".join(parts)
    return (text[0].upper() + text[1:] + ".") if parts else ""  # capitalize() would lowercase names


def _p_or_one(p: float | None) -> float:
    """A missing p reads as 1; a p that underflowed to 0.0 stays 0 (`p or 1.0` turned the
    strongest result on the page into "p=1.000")."""
    return 1.0 if p is None else p


def _change(factor: str, level: str) -> str:
    if level.lower() in OFF_WORDS:
        return f"turning off {factor}"
    if level.lower() in ON_WORDS:
        return f"turning on {factor}"
    return f"setting {factor}={level}"


def _untested_finding(report: Report, metric: str, measured: Sequence[CellView], base: CellView) -> Finding:
    """The result of a metric no comparison of which can be tested (report.untested): no finding,
    why, and the highest rate as a description (kind "null": the run's result line says it)."""
    seen = _untested_rates(metric, measured, base, len(report.cells))
    return Finding(
        kind="null",
        text=f"No finding about {metric} can be made from this run: {report.untested[metric]}. {seen} (descriptive).",
    )


def _untested_rates(metric: str, measured: Sequence[CellView], base: CellView, cells: int) -> str:
    """What the measured cells' rates show, in words: the highest, or that they are alike ("the
    highest" of equals misleads). Cells with no data are not "alike": a run interrupted after its
    baseline trial said "Every cell has the same rate" of 7 cells never measured (auditexports2)."""
    high = _highest(measured, metric)
    base_rate = fmt_rate(base.proportions[metric].rate)
    unmeasured = cells - len(measured)
    if not high.is_baseline:
        highest = fmt_rate(high.proportions[metric].rate)
        return f"Highest: {highest} in cell {fmt_levels(high.levels)}, vs {base_rate} in the baseline"
    if len(measured) == 1 and unmeasured:
        none = f"{counted(unmeasured, 'cell')} {noun(unmeasured, 'has', 'have')} none"
        return f"Only the baseline has data: {base_rate}; {none}"
    if len({c.proportions[metric].rate.rate for c in measured}) > 1:
        return f"The baseline has the highest rate, {base_rate}"
    if unmeasured:
        return f"Every cell with data ({len(measured)} of {cells}) has the same rate; the baseline's: {base_rate}"
    return f"Every cell has the same rate; the baseline's: {base_rate}"


def _null_finding(report: Report, metric: str, measured: Sequence[CellView], base: CellView) -> Finding:
    others = [c for c in measured if not c.is_baseline]
    base_rate = base.proportions[metric].rate
    if not others:
        return Finding(
            kind="null", text=f"Only the baseline has {metric} data: {fmt_rate(base_rate)}; nothing to compare it with."
        )
    # the smallest Holm p, said as such: "Closest:" was read as the rate closest to the baseline's
    nearest = min(others, key=lambda c: _p_or_one(c.proportions[metric].p_holm))
    p = nearest.proportions[metric]
    unmeasured = _unmeasured(report, metric)
    which = f"any of the {len(others)} cells compared" if unmeasured else "any cell"
    return Finding(
        kind="null",
        text=(
            f"No significant difference in {metric} between {which} and the baseline, which is at "
            f"{fmt_rate(base_rate)}{unmeasured}. Nearest to significance: {fmt_rate(p.rate)} in cell "
            f"{fmt_levels(nearest.levels)} ({fmt_p(p.p_holm)}, Holm). " + _power_text(report, metric, measured, base)
        ),
    )


def _unmeasured(report: Report, metric: str) -> str:
    """A clause naming the cells with no data of `metric` (every trial failed, or none ran): a result
    "between any cell and the baseline" would speak for cells nothing was measured in; "" if none."""
    gone = _not_compared(report, metric)
    if not gone:
        return ""
    named = _join([f"cell {fmt_levels(c.levels)}" for c in gone[:3]]) + (
        f" and {len(gone) - 3} more" if len(gone) > 3 else ""
    )
    verb = "has" if len(gone) == 1 else "have"
    return f" ({named} {verb} no {metric} data, so {'it was' if len(gone) == 1 else 'they were'} not compared)"


def _of_compared(report: Report, metric: str, moved: int) -> str:
    """'2 of 7 cells', or '1 of the 2 cells compared' when some cells have no data of `metric`."""
    gone = _not_compared(report, metric)
    compared = len(report.cells) - 1 - len(gone)
    return f"{moved} of the {compared} cells compared" if gone else f"{moved} of {compared} cells"


def _not_compared(report: Report, metric: str) -> list[CellView]:
    """The cells besides the baseline with no data of `metric` (every trial failed, or none ran)."""
    return [c for c in report.cells if not c.is_baseline and not c.proportions[metric].rate.n]


def _estimated_phi(manifest: RunManifest, by_metric: Mapping[str, MetricRows]) -> dict[str, float]:
    found = {}
    for metric, kind in manifest.metrics.items():
        if kind == "proportion":
            disp = by_metric[metric].dispersion
            if disp.estimable:
                found[metric] = disp.phi
    return found


def _power_text(report: Report, metric: str, measured: Sequence[CellView], base: CellView) -> str:
    """The power of the comparison the report would make of a difference: with replicates its trial-level
    test (quasi-binomial, or the likelihood ratio on the trials) simulated on this design (trials,
    sessions, the other cells' rates, the estimated dispersion, else none beyond the binomial), else
    exact Fisher. Replicated cells without events (nothing estimates the spread) are told the trial
    test's power too: a difference would give the trials events to spread over, and the report would
    test it by that test, not Fisher's on pooled sessions (whose power, stated there, promised a
    15-point rise past Holm at 2 trials of 40 where the report's test found it in 0 of 300 runs)."""
    others = [c for c in measured if not c.is_baseline]
    smallest = min(others, key=lambda c: c.proportions[metric].rate.n)
    base_rate = base.proportions[metric].rate
    tests = max(1, sum(report.tests.values()))  # Holm's family is the whole report's
    trials = min(c.proportions[metric].trials for c in measured)
    if trials < 2:
        return power_sentence(smallest.proportions[metric].rate.n, base_rate.n, base_rate.rate or 0.0, tests)
    design = power.Design(
        sessions=max(1, round(base_rate.n / max(base.proportions[metric].trials, 1))),
        trials=trials,
        other_rates=tuple(c.proportions[metric].rate.rate or 0.0 for c in others if c is not smallest),
        phi=max(1.0, report.dispersion.get(metric, 1.0)),
    )
    unequal = any(c.proportions[metric].trials != trials for c in measured)
    return quasi_power_sentence(design, base_rate.rate or 0.0, tests, fewest=unequal)


def quasi_power_sentence(design: power.Design, base_rate: float, tests: int, *, fewest: bool = False) -> str:
    """Simulated power of the report's comparison with replicates (core.power.quasi_detectable): the
    quasi-binomial test, or the trials' likelihood ratio where the spread rests on too few degrees
    of freedom (core.clustered's sparse rule), exactly as the report decides. `fewest`: cells ran
    unequal numbers of trials, and the design simulated gives every cell the fewest any ran."""
    per_test = power.quasi_detectable(design, base_rate)
    where = "in the cell with the fewest (simulated as if every cell had as few)" if fewest else "per cell"
    text = (
        f"With {design.trials} trials of {design.sessions} sessions {where}, this run's quasi-binomial comparison "
        f"had 80% power {_power_for(per_test)} (simulated on this design with the "
        f"report's own tests, the likelihood ratio on the trials where the spread rests on too few degrees of "
        f"freedom: {power.simulation_note(design)}, dispersion {design.phi:.2f}; "
        f"at p < "
        f"{stats.ALPHA:g}"
    )
    if tests > 1:
        strict = power.quasi_detectable(design, base_rate, alpha=stats.ALPHA / tests)
        text += f"; to pass Holm's first step over {tests} tests: {_directions(strict)}"
    return text + ")."


def power_sentence(n_cell: int, n_base: int, base_rate: float, tests: int) -> str:
    """What this design could have detected: exact Fisher power (core.power), both directions,
    per comparison and at the strictest Holm step over the report's `tests`."""
    per_test = power.detectable(n_cell, n_base, base_rate)
    text = (
        f"With {n_cell} sessions in the smallest cell and {n_base} in the baseline, this run had 80% power "
        f"{_power_for(per_test)} (exact power of Fisher's test at p < {stats.ALPHA:g}"
    )
    if tests > 1:
        strict = power.detectable(n_cell, n_base, base_rate, alpha=stats.ALPHA / tests)
        text += f"; to pass Holm's first step over {tests} tests: {_directions(strict)}"
    return text + ")."


def _power_for(d: power.Detectable) -> str:
    """'only for differences of about +9.7 points (to 9.7%) ...', or, where no change reaches 80%
    power, 'for no rise or fall at all (...)': it read 'only for differences of about no rise or
    fall at all' (the eighth new-user walk, 2 trials of 6 sessions a cell)."""
    said = _directions(d)
    return f"for {said}" if said.startswith("no ") else f"only for differences of about {said}"


def _directions(d: power.Detectable) -> str:
    """'+9.7 points (to 9.7%) or -3.1 points (to 2.0%)'; a direction no change reaches 80% power in is
    said in words: '+9.7 points (to 9.7%), as a rate of 0% cannot fall', '+37.0 points (to 53.7%),
    but no fall at all (not even to 0%)'. It read 'or no fall (not even to 0%)', which a reader
    took for a fall the run could detect."""
    up = f"+{d.rise * 100:.1f} points (to {_pct(d.baseline + d.rise)}%)" if d.rise is not None else ""
    down = f"-{d.fall * 100:.1f} points (to {_pct(d.baseline - d.fall)}%)" if d.fall is not None else ""
    if d.baseline <= 0:
        return f"{up or 'no rise at all (not even to 100%)'}, as a rate of 0% cannot fall"
    if d.baseline >= 1:
        return f"{down or 'no fall at all (not even to 0%)'}, as a rate of 100% cannot rise"
    if up and down:
        return f"{up} or {down}"
    if up or down:
        return f"{up or down}, but no {'fall' if up else 'rise'} at all (not even to {'0' if up else '100'}%)"
    return "no rise or fall at all (not even to 100% or 0%)"


def _interaction_findings(report: Report, metric: str, limit: int = 3) -> list[Finding]:
    """Interactions that survive the policy: three-way first (an AND of three flags), then
    "overlap matters when cuda_graph is on; with cuda_graph off its effect was not shown" for
    two-way ones."""
    ranked = sorted(
        (i for i in report.interactions if i.metric == metric and i.finding),
        key=lambda i: (-i.order, i.p_holm, -abs(i.estimate)),
    )
    said = [(inter, _interaction_text(report, metric, inter)) for inter in ranked]
    return [
        Finding(kind="finding", text=text + missing.clause(metric, missing.effect_cells(report.cells, inter)))
        for inter, text in said
        if text
    ][:limit]


def _interaction_text(report: Report, metric: str, inter: InteractionView) -> str:
    if inter.order > 2:
        return (
            f"{_join(inter.factors)} act together on {metric}: their {inter.order}-way interaction is "
            f"{fmt_pts(inter)} ({fmt_p(inter.p_holm)}, Holm), so the effect of any one of them depends on "
            "the levels of all the others (not a sum of pairwise effects)."
        )
    options = [_two_way_text(report, metric, inter, i) for i in (0, 1)]
    readable = [(text, one_shown) for text, one_shown in options if text]
    contrasted = [text for text, one_shown in readable if one_shown]  # a finding beside a non-finding reads clearest
    return (contrasted or [text for text, _ in readable] or [""])[0]


def _two_way_text(report: Report, metric: str, inter: InteractionView, which: int) -> tuple[str, bool]:
    """The interaction as `factor`'s effect at each level of the other factor, and whether only one
    of the two is a finding. A non-finding is "not shown", never "no effect": its interval, printed
    beside it, is what the data bound it to, so the sentence never says "only when"."""
    factor, level, ref = inter.factors[which], inter.levels[which], inter.references[which]
    m = inter.factors[1 - which]
    conditional = {
        e.given[m]: e
        for e in report.effects
        if e.metric == metric and e.factor == factor and e.level == level and list(e.given) == [m]
    }
    at_level, at_ref = conditional.get(inter.levels[1 - which]), conditional.get(inter.references[1 - which])
    if at_level is None or at_ref is None:
        return "", False
    strong, weak = (at_level, at_ref) if abs(at_level.estimate) >= abs(at_ref.estimate) else (at_ref, at_level)
    switching = (
        f"switching {factor} from {ref} to {level} changes {metric} by {fmt_pts(strong)} ({fmt_p(strong.p_holm)})"
    )
    interaction = f"(interaction {fmt_pts(inter)}, {fmt_p(inter.p_holm)}; all Holm)"
    if strong.finding and not weak.finding:
        return (
            f"{factor} matters when {m}={strong.given[m]}: {switching}; with {m}={weak.given[m]} its effect was not "
            f"shown ({fmt_pts(weak)}, {fmt_p(weak.p_holm)}) {interaction}."
        ), True
    return (
        f"{factor} matters more when {m}={strong.given[m]}: {switching} with {m}={strong.given[m]}, but by "
        f"{fmt_pts(weak)} ({fmt_p(weak.p_holm)}) with {m}={weak.given[m]} {interaction}."
    ), False


def _number_effect_findings(report: Report, primary: str | None, limit: int = 3) -> list[Finding]:
    """A factor that moves a numeric metric (the anomaly canary), beside what the outcome did."""
    moved = sorted((e for e in report.number_effects if e.finding), key=lambda e: e.p_holm)
    return [
        Finding(
            kind="finding",
            text=_number_effect_text(report, e, primary)
            + missing.clause(e.metric, missing.effect_cells(report.cells, e)),
        )
        for e in moved[:limit]
    ]


def _number_effect_text(report: Report, e: NumberEffectView, primary: str | None) -> str:
    ratio = e.ratio
    if ratio is not None and ratio > 0:
        times = f"{ratio:.1f}x" if ratio >= 1 else f"{1 / ratio:.1f}x"
        size = f"{times} {'higher' if ratio >= 1 else 'lower'}"
    else:
        size = "higher" if e.shift > 0 else "lower"
    interval, unit = "", report.units.get(e.metric, "")
    if e.low is not None and e.high is not None:  # no coverage: van Elteren's normal approximation
        covers = f"{e.coverage:.1%} coverage" if e.coverage is not None else "~95%, normal approximation"
        interval = f" [{e.low:g}, {e.high:g}] ({covers})"
    text = (
        f"Median {e.metric} is {size} with {e.factor}={e.level} than with {e.factor}={e.reference}: "
        f"{with_unit(e.median_level, unit)} vs {with_unit(e.median_reference, unit)} over {e.n_level} vs "
        f"{e.n_reference} trials (shift {with_unit(e.shift, unit, '+g')}{interval}; {fmt_p(e.p_holm)}, Holm, "
        f"{_number_effect_method(e)})"
    )
    outcome = next(
        (
            x
            for x in report.effects
            if x.metric == primary and x.factor == e.factor and x.level == e.level and not x.given
        ),
        None,
    )
    if outcome is not None and primary in report.untested:
        text += f"; the same change moves {primary} by {fmt_pts(outcome)} (not tested: {report.untested[primary]})"
    elif outcome is not None:
        verdict = "also a finding" if outcome.finding else "not a finding"
        text += f"; the same change moves {primary} by {fmt_pts(outcome)} ({fmt_p(outcome.p_holm)}, {verdict})"
    return text[0].upper() + text[1:] + "."


def _number_effect_method(e: NumberEffectView) -> str:
    """The test behind a numeric effect, as findings.number_effects chose it."""
    if not e.stratified:
        return "Mann-Whitney"
    return "van Elteren's stratified rank-sum, each stratum weighed the same as cells ran unequal numbers of trials"


def _noise_findings(report: Report, metric: str) -> list[Finding]:
    found = []
    noisy = [c for c in report.cells if _overdispersed(c, metric)]
    if noisy:
        worst = min(noisy, key=lambda c: _p_or_one(c.proportions[metric].overdispersion_p_holm))
        p = worst.proportions[metric]
        tested = sum(c.proportions[metric].overdispersion_p_holm is not None for c in report.cells)
        rates = ", ".join(fmt_pct(r) for r in p.trial_rates)
        found.append(
            Finding(
                kind="caution",
                text=(
                    f"Trials of the same cell disagree more than session-to-session noise explains in "
                    f"{counted(len(noisy), 'cell')}, e.g. {fmt_levels(worst.levels)}: {rates} across its trials "
                    f"({fmt_p(p.overdispersion_p_holm)}, Holm over the {counted(tested, 'cell')} tested; exact "
                    "test given each cell's events). Pooled intervals may be too narrow there; add "
                    "replicates before trusting a small difference."
                ),
            )
        )
    wide = [
        c
        for c in report.cells
        if c.proportions[metric].rate.n and c.proportions[metric].rate.high - c.proportions[metric].rate.low > 0.3
    ]
    if wide:
        found.append(_too_few_sessions(wide, metric))
    return found


WIDE_NAMED = 3  # cells the too-few-sessions caution names; the rest are counted


def _too_few_sessions(wide: Sequence[CellView], metric: str) -> Finding:
    """Which cells' intervals are over 30 points wide, named. Why: '1 cell has too few sessions to
    say much (as few as 50)' named none, where both cells of the run had 50 sessions."""
    n_small, one = min(c.proportions[metric].rate.n for c in wide), len(wide) == 1
    names = [c.cell for c in wide[:WIDE_NAMED]]
    names += [f"{len(wide) - WIDE_NAMED} more"] if len(wide) > WIDE_NAMED else []
    sessions = f"{n_small} sessions" if one else f"as few as {n_small}"
    return Finding(
        kind="caution",
        text=(
            f"{counted(len(wide), 'cell')} {'has' if one else 'have'} too few sessions to say much ({_join(names)}: "
            f"{sessions}): {'its 95% interval is' if one else 'their 95% intervals are'} over 30 points wide."
        ),
    )


def _moved_findings(report: Report, primary: str | None) -> list[Finding]:
    """A number that moved vs the baseline, next to what the outcome did in that cell."""
    base = _cell(report, report.baseline_cell)
    if base is None:
        return []
    found = []
    for metric, kind in report.metrics.items():
        if kind != "number":
            continue
        moved = [c for c in report.cells if c.numbers[metric].significant]
        if not moved:
            found += _untestable(report, metric, base)
            continue
        # the telling case first: the number moved where the outcome did not
        cell = min(
            moved,
            key=lambda c: (
                bool(primary and primary in c.proportions and c.proportions[primary].significant),
                _p_or_one(c.numbers[metric].p_holm),
            ),
        )
        text = _moved_text(report, metric, cell, base, len(moved)) + missing.clause(metric, [cell, base, *moved])
        found.append(Finding(kind="finding", text=text))
    return found


def _untestable(report: Report, metric: str, base: CellView) -> list[Finding]:
    """Say so when too few trials per cell make a significant Mann-Whitney result impossible, and
    that the factor effects can still be tested only where they pool trials enough to be."""
    others = [c.numbers[metric].n for c in report.cells if not c.is_baseline and c.numbers[metric].n]
    n_base = base.numbers[metric].n
    if not others or not n_base:
        return []
    if max(others) + n_base >= 2 / stats.ALPHA:
        return []  # comb(a + b, a) >= a + b, so p <= 2 / (a + b) <= alpha: skip huge binomials
    best = min(2 / math.comb(n + n_base, n) for n in others)
    if best <= stats.ALPHA:
        return []
    tied = min(ranks.mann_whitney_smallest_p(n, n_base) for n in others)  # ties switch to the normal approximation
    # only where a factor effect pools enough trials to reach significance: in a 1-factor run it
    # compares the same two cells, and the clause promised a test that could not succeed either
    pooled = any(
        e.metric == metric and ranks.mann_whitney_min_p(e.n_level, e.n_reference) <= stats.ALPHA
        for e in report.number_effects
    )
    return [
        Finding(
            kind="caution",
            text=(
                f"{metric}: with {_trials_per_cell(others)} per cell and {n_base} in the baseline, no "
                f"difference could reach significance{_unless_tied(tied)} (the smallest possible p is {best:.2f}; "
                f"{tied:.2g} with values tied within each side); run more replicates to compare it between cells"
                + (" (the factor effects pool trials across cells and can still be tested)." if pooled else ".")
            ),
        )
    ]


def _unless_tied(tied: float) -> str:
    """Where only tied values could reach significance (3 vs 3: 0.047 with ties, 0.1 without), the
    caution says so: it said no difference could, and the Holm family counts such a test."""
    return " unless values tie within each side" if tied < stats.ALPHA else ""


def _trials_per_cell(counts: Sequence[int]) -> str:
    """'3 trials', or '2-3 trials' when the cells ran different numbers (adaptive stopping, failed
    trials): the largest alone said every cell had as many, where most may have had fewer."""
    low, high = min(counts), max(counts)
    return counted(high, "trial") if low == high else f"{low}-{high} trials"


def _moved_text(report: Report, metric: str, cell: CellView, base: CellView, count: int) -> str:
    primary = report.primary_metric
    num, ref = cell.numbers[metric], base.numbers[metric]
    unit = report.units.get(metric, "")
    text = (
        f"{metric} moved in {counted(count, 'cell')}: median {fmt_num(num, unit)} in cell "
        f"{fmt_levels(cell.levels)} vs {fmt_num(ref, unit)} in the baseline "
        f"({fmt_p(num.p_holm)}, Holm, Mann-Whitney)"
    )
    if primary and primary in cell.proportions and primary in report.untested:
        out, out_ref = cell.proportions[primary], base.proportions[primary]
        why = report.untested[primary]
        text += f"; {primary} there: {fmt_rate(out.rate)} vs {fmt_rate(out_ref.rate)} (not tested: {why})"
    elif primary and primary in cell.proportions:
        out, out_ref = cell.proportions[primary], base.proportions[primary]
        # not significant is not "unchanged": too few sessions, or too small a change, to tell
        verb = "also differs" if out.significant else "was not shown to differ"
        text += (
            f"; {primary} {verb} there: {fmt_rate(out.rate)} vs {fmt_rate(out_ref.rate)} ({fmt_p(out.p_holm)}, Holm"
            + ("" if out.significant else "; not evidence that it is unchanged")
            + ")"
        )
    return text[0].upper() + text[1:] + "."


def _drift_findings(report: Report) -> list[Finding]:
    """A caution for a flagged drift, saying what it assumed when the spread was not estimable."""
    found = []
    for view in report.drift:
        if not view.flagged:
            continue
        rates = ", ".join(f"{fmt_pct(r.rate)} (round {r.round})" for r in view.rounds[:8])
        tests = f"homogeneity {fmt_p(view.p_homogeneity)}, trend {fmt_p(view.p_trend)}"
        tests += f"; {clustered.ASSUMED_NOTE}" if view.assumed else ""
        text = (
            f"The baseline's {view.metric} drifted across rounds: {rates} ({tests}). "
            "Differences between cells may reflect time, not the factors."
        )
        found.append(Finding(kind="caution", text=text))
    return found


def _failure_findings(report: Report, failed: Sequence[TrialRow | TrialRecord]) -> list[Finding]:
    if not failed:
        return []
    kinds = _count(_failure_kind(t) or "unknown" for t in failed)
    detail = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    one = len(failed) == 1
    return [
        Finding(
            kind="info",
            text=(
                f"{counted(len(failed), 'trial attempt')} failed or {'was' if one else 'were'} interrupted "
                f"({detail}); {'it is' if one else 'they are'} listed under Failures and {'is' if one else 'are'} "
                "not counted as data."
            ),
        )
    ]


def result_headline(report: Report) -> str:
    """The run's result in one sentence: the first finding about the data (a difference or its
    absence), else the first finding. A run with some failed trials keeps its result here; its
    status is shown beside it, never instead of it (issue 12). A run not finished (running,
    stale, interrupted) opens with how far it got, then its result so far: the index, /api/runs
    and the webhooks tell each such run the same way, whatever its first finding is. A hunt's
    result is its verdict, as its own report words it (not the cells' comparisons): index.html,
    summary.json, the runs index and the webhook all quote this, after how far an unfinished
    hunt got."""
    result: Finding | None
    if report.hunt is not None:
        result = Finding(kind="finding" if report.hunt.found else "caution", text=report.hunt.verdict)
    else:
        result = next((f for f in report.headline if f.kind in ("finding", "null")), None)
    if report.status in UNFINISHED:
        return status_sentence(report) + (f" So far: {result.text}" if result else "")
    first = result or (report.headline[0] if report.headline else None)
    return first.text if first else ""


def suspect_reasons(report: Report) -> list[str]:
    """Why this run's data should not be trusted as is, one short reason each: failed or void
    trials, baseline drift, overdispersion (the cautions the report computes). Empty: clean."""
    reasons = []
    if report.failed:
        errors = _count(f.error for f in report.failures)
        void = errors.pop(VOID_ERROR, 0)
        named = ", ".join(f"{n} {e}" for e, n in sorted(errors.items()))
        parts = [f"{void} void (output broke a repro.valid rule)"] if void else []
        parts += [named] if named else []
        shown = f" (of the first {len(report.failures)}: {'; '.join(parts)})" if parts else ""
        reasons.append(
            f"{counted(report.failed, 'trial attempt')} failed or {'was' if report.failed == 1 else 'were'} void{shown}"
        )
    for view in report.drift:
        if view.flagged:
            reasons.append(
                f"baseline {view.metric} drifted across rounds "
                f"(homogeneity {fmt_p(view.p_homogeneity)}, trend {fmt_p(view.p_trend)})"
            )
    for metric, kind in report.metrics.items():
        noisy = [c.cell for c in report.cells if _overdispersed(c, metric)] if kind == "proportion" else []
        if noisy:
            reasons.append(
                f"{metric} overdispersed in {counted(len(noisy), 'cell')} (trials disagree beyond binomial noise)"
            )
    return reasons


VOID_ERROR = "InvalidOutput"  # edges.workload's error for a trial whose output broke repro.valid
STOPPED_STATUSES = frozenset({"interrupted", "running"})  # run.json of a run that has not reached its end


def completed_of(completed: int, planned: int | None) -> str:
    """How far a run got, in the words of the report's status caution (and orch compare's).
    `planned` None: a hunt, whose plan.json holds only its first wave (no "N of M planned")."""
    if planned is None:
        return f"{counted(completed, 'trial')} completed (a hunt decides its trials as it goes)"
    return f"{completed} of {counted(planned, 'planned trial')} completed"


def incomplete_reason(manifest: RunManifest, rows: Sequence[TrialRow], stopped: bool = False) -> str | None:
    """Why a run's data is not its whole sweep, or None: it stopped early (run.json says interrupted,
    or still running: its controller runs or died; or `stopped`, a run_interrupted event since the
    controller last started, whatever run.json says) with planned trials never finished. A run
    interrupted during its final restore, after its last trial, is complete; a hunt that stopped is
    not (its plan holds only its first wave)."""
    if manifest.status not in STOPPED_STATUSES and not stopped:
        return None
    finished = {row.trial for row in trial_rows(rows)}
    planned = {p.trial for p in manifest.plan} or set(range(manifest.plan_trials))
    if planned <= finished and not manifest.hunt:
        return None
    how = {"interrupted": "interrupted", "running": "still running, or its controller died"}.get(
        manifest.status, f"interrupted (its journal says so; run.json says {manifest.status})"
    )
    return f"{how}, {completed_of(len(completed_rows(rows)), None if manifest.hunt else len(planned))}"


def _overdispersed(cell: CellView, metric: str) -> bool:
    p = cell.proportions.get(metric)
    return p is not None and findings.is_finding(p.overdispersion_p_holm)


def _failure_kind(trial: TrialRow | TrialRecord) -> str | None:
    if isinstance(trial, TrialRow):
        return trial.failure_kind
    return trial.failure.kind if trial.failure else None


def _cell(report: Report, cell_id: str | None) -> CellView | None:
    return next((c for c in report.cells if c.cell == cell_id), None) if cell_id else None


# ----------------------------------------------------------------------------- formatting


def fmt_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{_pct(value)}%"


def _pct(value: float) -> str:
    """One decimal, or two significant digits below 0.1% (a bound of 0.0008% is not 0.0%)."""
    points = value * 100
    return f"{points:.2g}" if 0 < abs(points) < 0.05 else f"{points:.1f}"


def fmt_rate(rate: RateView) -> str:
    """16.3% [11.2-23.0] (13/80)."""
    if rate.rate is None:
        return "no data (0 sessions)"
    return f"{_pct(rate.rate)}% [{_pct(rate.low)}-{_pct(rate.high)}] ({rate.k}/{rate.n})"


def fmt_pts(item: EffectView | InteractionView) -> str:
    return f"{item.estimate * 100:+.1f} pts [{item.low * 100:+.1f}, {item.high * 100:+.1f}]"


def fmt_num(cell: NumberCell, unit: str = "") -> str:
    """320 [310-330] (96.9% coverage), or 160.2 s [158.1-162.0] with the metric's unit; no
    interval when too few values reach 95% (n < 6)."""
    if cell.median is None:
        return "no data"
    median = with_unit(cell.median, unit)
    if cell.low is None or cell.high is None or cell.coverage is None:
        return f"{median} (too few values for a 95% interval)"
    return f"{median} [{cell.low:g}-{cell.high:g}] ({cell.coverage:.1%} coverage)"


def with_unit(value: float, unit: str, spec: str = "g") -> str:
    """`160.2 s`, or `160.2` for a metric that declares no unit (what every page showed before)."""
    return f"{value:{spec}}{' ' + unit if unit else ''}"


def fmt_p(p: float | None, op: str = "=") -> str:
    if p is None:
        return "p n/a"
    if p >= 0.001:
        return f"p{op}{p:.3f}"
    if p < 1e-300:  # Fisher underflows to 0 with hundreds of thousands of sessions
        return "p<1e-300"
    mantissa, exponent = f"{p:.0e}".split("e")
    return f"p{op}{mantissa}e{int(exponent)}"


def fmt_levels(levels: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in levels.items())


def _join(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


# ----------------------------------------------------------------------------- failures, trials


def _failure_view(record: TrialRecord, redactor: Redactor) -> FailureView:
    failure, redact_text = record.failure, redactor.text
    return FailureView(
        trial=record.trial,
        attempt=record.attempt,
        cell=record.cell,
        kind=failure.kind if failure else record.status,
        error=failure.error if failure else "",
        message=redact_text(failure.message) if failure else "",
        detail=redact_text(failure.detail) if failure else "",
        links=_links(record),
    )


def _drilldown(trials: Sequence[TrialRow], cap: int) -> list[TrialRow]:
    """All trials when few; else failures first, then completed ones round-robin over cells."""
    if len(trials) <= cap:
        return list(trials)
    chosen = [t for t in trials if t.status != "completed"][: cap // 2]
    by_cell: dict[str, list[TrialRow]] = {}
    for record in trials:
        if record.status == "completed":
            by_cell.setdefault(record.cell, []).append(record)
    queues = [iter(v) for v in by_cell.values()]
    while len(chosen) < cap and queues:
        for queue in list(queues):
            following = next(queue, None)
            if following is None:
                queues.remove(queue)
            elif len(chosen) < cap:
                chosen.append(following)
    return sorted(chosen, key=lambda t: (t.trial, t.attempt))


def _trial_view(record: TrialRecord, redactor: Redactor) -> TrialView:
    repro, redact_text = record.repro, redactor.text
    return TrialView(
        trial=record.trial,
        round=record.round,
        attempt=record.attempt,
        cell=record.cell,
        status=record.status,
        testbed=record.testbed,
        started=record.started,
        duration_s=record.duration_s,
        env=redact_env(record.env, redactor),
        restarted=list(record.restarted),
        health_wait_s=dict(record.health_wait_s),
        command=redact_text(repro.command) if repro else "",
        exit_code=repro.exit_code if repro else None,
        repro_duration_s=repro.duration_s if repro else None,
        stdout_tail=redact_text(repro.stdout_tail) if repro else "",
        metrics={name: _metric_text(v) for name, v in record.metrics.items()},
        links=_links(record),
        failure=(f"{record.failure.kind}: {record.failure.error}: {redact_text(record.failure.message)}")
        if record.failure
        else "",
        record_json=redacted_json(record, redactor),
    )


def _metric_text(value: MetricValue) -> str:
    if value.kind == "proportion" and value.n:
        return f"{value.k or 0}/{value.n} = {fmt_pct((value.k or 0) / value.n)}"
    if value.value is None:
        return "missing"
    return f"{value.value:g}{(' ' + value.unit) if value.unit else ''}"


def _links(record: TrialRecord) -> list[Link]:
    links = []
    if record.repro:
        for label, path in (("repro stdout", record.repro.stdout_path), ("repro stderr", record.repro.stderr_path)):
            if path:
                links.append(Link(label=label, path=path, href=safe_href(path)))
    for label, path in record.logs.items():
        links.append(Link(label=label, path=path, href=safe_href(path)))
    return links


def safe_href(path: str) -> str | None:
    """A relative path inside the run directory, or None (never a scheme, never `..`)."""
    if not path or path.startswith(("/", "\\")) or "\\" in path:
        return None
    parts = path.split("/")
    if any(p in ("..", "") for p in parts) or ":" in parts[0]:
        return None
    if any(ord(ch) < 32 for ch in path):
        return None
    return "/".join(parts)


# ----------------------------------------------------------------------------- redaction


def redact_env(env: Mapping[str, Mapping[str, str]], redactor: Redactor) -> dict[str, dict[str, str]]:
    return {role: {k: redactor.value(k, v) for k, v in variables.items()} for role, variables in env.items()}


def redacted_json(record: TrialRecord, redactor: Redactor) -> str:
    """The journal record as shown in the drill-down: pretty JSON, secrets masked (its free texts as
    the journal writer masks them, core.masking; its env by name)."""
    masked = mask_record(record, redactor)
    return masked.model_copy(update={"env": redact_env(record.env, redactor)}).model_dump_json(indent=2)


def _provenance(manifest: RunManifest) -> Provenance:
    redactor = manifest.redactor
    return Provenance(
        orch_version=manifest.orch_version,
        run_id=manifest.run_id,
        testbed=manifest.testbed,
        seed=manifest.seed,
        order=manifest.order,
        replicates=manifest.replicates,
        started=manifest.started,
        ended=manifest.ended,
        matrix_path=manifest.matrix_path,
        matrix_text=redactor.text(manifest.matrix_text),
        matrix_sha256=manifest.matrix_sha256,
        matrix_sha_ok=manifest.texts_redacted or _sha256(manifest.matrix_text) == manifest.matrix_sha256,
        inventory_path=manifest.inventory_path,
        inventory_text=redactor.text(manifest.inventory_text),
        inventory_sha256=manifest.inventory_sha256,
        inventory_sha_ok=manifest.texts_redacted or _sha256(manifest.inventory_text) == manifest.inventory_sha256,
        texts_redacted=manifest.texts_redacted,
        hosts={role: _masked(manifest, facts) for role, facts in manifest.hosts.items()},
        testbed_hosts=(beds := _testbed_hosts(manifest))[0],
        testbed_hosts_more=beds[1],
        trial_order=[f"{p.trial} r{p.round} {p.cell}" for p in manifest.plan],
        controller=controller_lines(manifest),
    )


def _masked(manifest: RunManifest, facts: dict[str, str]) -> dict[str, str]:
    """One host's facts with its secret values masked."""
    return {k: manifest.redactor.value(k, v) for k, v in facts.items()}


def _testbed_hosts(manifest: RunManifest) -> tuple[list[tuple[str, str, dict[str, str]]], int]:
    """A parallel run's host rows, every testbed's roles, and how many were cut (a one-testbed run:
    none, its page as before). Why: `hosts` is the first testbed's only, and a reader could not see
    that another ran other GPUs or another server version. Bounded: HOST_ROWS_SHOWN rows, masked."""
    if len(manifest.testbeds) < 2:
        return [], 0
    beds = manifest.testbed_hosts
    rows = [(name, role) for name in manifest.testbeds for role in beds.get(name, {})]
    shown = [(n, role, _masked(manifest, beds[n][role])) for n, role in rows[:HOST_ROWS_SHOWN]]
    return shown, len(rows) - len(shown)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------- run-level facts
# Facts that need more than the trial rows: adaptive decisions (journal events) and whether
# parallel testbeds differ (each trial's testbed: report.testbeds). Added to the headline as plain sentences.


def with_adaptive_facts(report: Report, events: Sequence[EventRecord], *, adaptive: bool = False) -> Report:
    """The headline of an adaptive run: what the sequential tests decided first, then the caution on
    the fixed analysis' findings (adaptive_caution), the report's own findings, and one sentence per
    cell stopped early. `events`: the run's journaled events (its "cell_decided" ones). `adaptive`:
    the matrix has the rule, so a run that decided nothing says so (its page had no word of it)."""
    summary = adaptive_summary(events, max(0, len(report.cells) - 1), report.primary_metric)
    if summary is None and adaptive:
        summary = nothing_decided(report.primary_metric)
    caution = adaptive_caution(report, events)
    first = [f for f in (summary, caution) if f is not None]
    extra = adaptive_findings(events)
    if not (first or extra):
        return report
    brief = adaptive_brief(events, max(0, len(report.cells) - 1), report.primary_metric)
    return report.model_copy(update={"headline": [*first, *report.headline, *extra], "adaptive": brief})


def nothing_decided(metric: str | None) -> Finding:
    """The top of an adaptive run's headline when no comparison was decided: no cell stopped early."""
    what = f" in {metric}" if metric else ""
    return Finding(
        kind="info",
        text=f"Adaptive stopping{what}: no cell's comparison with the baseline was decided, so no cell "
        "stopped early; the fixed analysis below has the last word.",
    )


def adaptive_caution(report: Report, events: Sequence[EventRecord]) -> Finding | None:
    """The correction an adaptive run's findings survived, said beside them.

    Why: the fixed analysis (Holm, the 95% intervals of the differences) assumes every cell ran a
    number of trials fixed in advance. A rule that stops a cell where its comparison looks decided
    leaves its rate leaning toward the side that stopped it (and the cells that ran on, the other
    way): in A/A runs of matrices/overlap_hunt.yaml (question `lower`, every cell at 15%) the fixed
    analysis alone named a finding in 5.1-6.0% of reports. So each test comparing a cell stopped
    early is also read off the cells' anytime-valid intervals (report.stopped), which took it to
    1.5-2.0% (bench/bench_adaptive_honesty.py); the page says so where it names a finding. None when
    nothing was decided (every cell ran its rounds: a fixed design) or the report names no finding."""
    if not _decisions(events) or not names_a_finding(report) or not stopped_in(report):
        return None
    return Finding(
        kind="info",
        text=(
            "Adaptive stopping and the findings below: each test comparing a cell stopped early was also read off "
            "the cells' anytime-valid 95% intervals (valid at whatever round the data chose to stop), and the larger "
            "p-value went into Holm's correction, so these findings allow for the stopping (simulated A/A runs: a "
            "finding in 1.5-2.0% of reports, against 5.1-6.0% without this correction)."
        ),
    )


def names_a_finding(report: Report) -> bool:
    """Whether the page calls anything a finding: a headline sentence, or a mark in a table."""
    marks = (
        any(f.kind == "finding" for f in report.headline),
        any(v.significant for c in report.cells for v in c.proportions.values()),
        any(v.significant for c in report.cells for v in c.numbers.values()),
        any(e.finding for e in report.effects),
        any(i.finding for i in report.interactions),
        any(e.finding for e in report.number_effects),
        any(n.finding for n in report.neighbours),
    )
    return any(marks)


def adaptive_findings(events: Sequence[EventRecord]) -> list[Finding]:
    """One sentence per cell an adaptive sweep stopped early, with the decision's own numbers."""
    return [
        Finding(
            kind="info",
            text=f"Adaptive stopping: {cell} ran no more trials after its comparison "
            f"with the baseline was decided ({e.state}): {e.message} (the stopping rule's decision, per comparison "
            "at the adaptive alpha, not corrected across cells: not a finding)",
        )
        for cell, e in _decisions(events).items()
    ]


def adaptive_summary(events: Sequence[EventRecord], other_cells: int, metric: str | None) -> Finding | None:
    """What the sequential tests decided, across cells, for the top of the headline.

    Why: a cell stopped early has fewer sessions, so the fixed analysis of the pooled sessions
    (Fisher + Holm) may call nothing significant while the anytime-valid test, valid at the
    round it stopped, decided several cells. Without this sentence the two would seem to
    contradict each other. Kind "info", never "finding": each decision is taken at the adaptive
    alpha per comparison, with no correction across cells, so it does not meet the policy every
    finding on the page meets (Holm over the whole report), and it must not become the run's
    headline result (result_headline takes the first finding)."""
    parts = _decided_parts(events, other_cells)
    if not parts:
        return None
    what = f" in {metric}" if metric else ""
    return Finding(
        kind="info",
        text=(
            f"Adaptive stopping{what}: {'; '.join(parts)}. Each decision is an anytime-valid test "
            "(valid at the round it stopped; per comparison, at the matrix's adaptive alpha, not corrected "
            "across cells, so these are decisions of the stopping rule, not findings). The "
            "fixed analysis below pools each cell's sessions: cells stopped early have fewer, so it "
            "may not reach significance where the sequential test decided; its tests comparing a cell stopped "
            "early also hold under the cells' anytime-valid intervals (the correction the policy states)."
        ),
    )


def adaptive_brief(events: Sequence[EventRecord], other_cells: int, metric: str | None) -> str:
    """What the sequential tests decided, in one sentence for the views that quote a run's result
    (summary.json, the runs index, the webhook: Report.adaptive). Why: their result line is the
    report's first finding, so an adaptive run whose rule decided 6 of 7 cells lower was sent out as
    "No significant difference ... between any cell and the baseline" alone, while its page opens
    with the decisions (auditexports2). Empty when nothing was decided (no cell stopped early)."""
    parts = _decided_parts(events, other_cells)
    if not parts:
        return ""
    what = f" in {metric}" if metric else ""
    return (
        f"Adaptive stopping{what}: {'; '.join(parts)} (the stopping rule's decisions, per comparison at its "
        "alpha: not findings; the result above is the fixed analysis)."
    )


def _decided_parts(events: Sequence[EventRecord], other_cells: int) -> list[str]:
    """The decisions of adaptive_summary and adaptive_brief: decided cells by side, the undecided counted."""
    decided = _decisions(events)
    if not decided:
        return []
    different = sorted(c for c, e in decided.items() if e.state == "different")
    same = sorted(c for c, e in decided.items() if e.state != "different")
    sides = {_side(decided[c].message) for c in different}
    word = sides.pop() if len(sides) == 1 else "different"
    parts = []
    if different:
        how = "different from the baseline (either way)" if word == "different" else f"{word} than the baseline"
        parts.append(f"{len(different)} of {other_cells} cells decided {how}: {_join(different)}")
    if same:
        parts.append(f"{len(same)} decided without the difference asked about: {_join(same)}")
    undecided = other_cells - len(decided)
    if undecided > 0:
        parts.append(f"{undecided} ran every round undecided (the fixed analysis has the last word there)")
    return parts


def stopped_in(report: Report) -> list[str]:
    """The cells the report shows as stopped early (their rates carry the anytime-valid interval)."""
    return [c.cell for c in report.cells if any(p.stopped for p in c.proportions.values())]


def stopped_note(report: Report) -> str:
    """Why the cells an adaptive rule stopped early show wider intervals, under the cell table.

    Why: a rule that stops a cell on its data stops it where its rate looks decided, so the rate
    at the stop leans toward the side that stopped it, and a fixed-sample interval (Wilson's) held
    the true rate in only 47-89% of such cells in A/A sweeps at 10-15% (bench/bench_adaptive_honesty.py)."""
    cells = stopped_in(report)
    if not cells:
        return ""
    return (
        f"Stopped early ({len(cells)} of {len(report.cells)} cells: {_join(cells)}): adaptive stopping ran "
        "fewer trials than planned there, stopping on their own data, so their rates lean toward "
        "the side that stopped them. Their 95% intervals are anytime-valid (a confidence sequence: they "
        "hold at whatever round the data chose to stop), hence wider than a fixed-sample interval."
    )


def _decisions(events: Sequence[EventRecord]) -> dict[str, EventRecord]:
    decided: dict[str, EventRecord] = {}
    for e in events:
        if e.event == "cell_decided" and e.cell:
            decided.setdefault(e.cell, e)  # a resume repeats the same decision: keep the first
    return decided


def _side(message: str) -> str:
    """ "lower" / "higher" from a decision's reason ("... decided different (cell lower; ...")."""
    for side in ("lower", "higher"):
        if f"(cell {side};" in message:
            return side
    return "different"
