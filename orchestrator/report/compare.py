"""`orch compare RUN_A RUN_B`: two runs side by side, matching cells by their factor levels.

The question it answers: "did this change (a new build, a driver, another cluster) move the
metric, cell by cell, beyond noise?" The trial is the unit of replication, as in the report: sessions
of one trial share a restart, so a proportion's trial-to-trial dispersion is estimated from the trials
of every cell of both runs (core.clustered), and each common cell gets both rates with intervals
widened by it, the difference B - A with its interval and the report's test (quasi-binomial; the
likelihood ratio on the trials, core.trialexact, when the dispersion is sparse; no test at all when
trial-to-trial variation cannot be estimated, e.g. one trial per cell: the difference is then shown
with Newcombe's interval, as description). Numeric metrics get
medians and a Mann-Whitney test on trial values. Holm's correction runs over every comparison shown
that could reach significance (a number row with too few trials can be rejected at no step, so it
is left out, as core.family leaves it out of the report's), every metric in one family
(core.findings' policy), so the chance of any false "significant" on the page is at most 5%.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.core import clustered, ranks, stats
from orchestrator.core.clip import clip
from orchestrator.core.records import RunManifest, TrialRecord
from orchestrator.core.words import counted
from orchestrator.errors import UsageError
from orchestrator.report import missing
from orchestrator.report.build import fmt_p, incomplete_reason, stopped_cells, versus_baseline, with_unit
from orchestrator.report.provenance import scan_journal
from orchestrator.report.servedsettings import CellServers
from orchestrator.report.unlike import Unlike, lines_of, unlike
from orchestrator.store.atomic import write_text_atomic
from orchestrator.store.journal import MetricPoint, TrialRow, TrialRows
from orchestrator.store.liveness import resume_command
from orchestrator.store.rundir import ReportsDir, RunDir
from orchestrator.store.runtrials import completed_rows, read_run_rows, trial_rows


@dataclass(frozen=True)
class Side:
    trials: int
    k: int | None = None
    n: int | None = None
    rate: stats.Interval | None = None
    values: tuple[float, ...] = ()
    median: stats.Interval | None = None
    # an adaptive rule stopped this run's cell early (report.build.stopped_cells): `rate` is its
    # report's anytime-valid interval, and the page says "stopped early"
    stopped: bool = False


@dataclass(frozen=True)
class Row:
    cell: str
    metric: str
    kind: str
    a: Side
    b: Side
    diff: float | None
    diff_low: float | None
    diff_high: float | None
    p: float
    p_holm: float = 1.0
    tested: bool = True  # False: a side has no data; not a test, so not in the Holm family
    caution: str = ""  # the sides lost unalike shares of their finished trials (report.missing.pair_mark)
    too_few: str = ""  # no difference could reach significance with this many trials: nothing is shown either way

    @property
    def in_family(self) -> bool:
        """In the page's Holm family: a test that could reach significance (a row with too few
        trials can be rejected at no Holm step, so counting it only made the others' correction
        stricter: core.family's rule for the report)."""
        return self.tested and not self.too_few

    @property
    def significant(self) -> bool:
        return self.p_holm < stats.ALPHA

    @property
    def p_text(self) -> str:
        """Holm's p as the report writes it (1.000, 0.012, 4e-5): '%.2g' showed 1 where the run's
        own page says p=1.000 for the same test."""
        return fmt_p(self.p_holm).removeprefix("p=")


@dataclass(frozen=True)
class Comparison:
    a: RunManifest
    b: RunManifest
    rows: tuple[Row, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    summary: tuple[str, ...]
    warnings: tuple[str, ...] = ()  # one per suspect run: which run and why, shown above the result
    methods: Mapping[str, str] = field(default_factory=dict)  # metric -> the test it used, in words
    unlike: Unlike = field(default_factory=lambda: Unlike({}, ()))  # what else differed: metrics left out, the rest

    @property
    def differences(self) -> tuple[str, ...]:
        """What else differed between the runs, one sentence each (report.unlike), for the page's
        first section and the terminal."""
        return tuple(lines_of(self.unlike))

    def unit(self, metric: str) -> str:
        return unit_of(metric, self.a, self.b)


def unit_of(metric: str, a: RunManifest, b: RunManifest) -> str:
    """The metric's unit: both runs' (report.unlike leaves a metric out when they declare two),
    or the one run's that recorded it (a run of an older orch recorded none)."""
    return a.metric_units.get(metric) or b.metric_units.get(metric) or ""


def compare(
    a: RunManifest,
    ta: Sequence[TrialRecord | TrialRow],
    b: RunManifest,
    tb: Sequence[TrialRecord | TrialRow],
    *,
    suspect_a: Sequence[str] = (),
    suspect_b: Sequence[str] = (),
    stopped_a: bool = False,
    stopped_b: bool = False,
) -> Comparison:
    """PURE: the comparison model. Only completed trials count, each trial once: its completed
    record as store.runtrials chooses it (the report's choice). `ta`/`tb`: each run's records, or
    their compact rows (journal.read_trial_rows: all a comparison reads). `suspect_a`/`suspect_b`
    are each run's reasons to doubt its data (report.build.suspect_reasons): a difference against
    a run whose trials were void or drifting may be that run's fault, not the change's.
    `stopped_a`/`stopped_b`: the run's journal has a run_interrupted event since it last started
    (TrialRows.stopped). A run that stopped with planned trials unfinished (report.build.incomplete_reason:
    run.json's status says so too) is said to be incomplete, above everything: its cells hold fewer
    trials than planned and the cells it never reached are missing, so it is never shown as if whole."""
    return compare_cells(
        a,
        cell_trials(ta, a.metrics),
        b,
        cell_trials(tb, b.metrics),
        servers=(_servers(ta), _servers(tb)),
        suspect_a=suspect_a,
        suspect_b=suspect_b,
        incomplete_a=incomplete_reason(a, _rows(ta), stopped_a),
        incomplete_b=incomplete_reason(b, _rows(tb), stopped_b),
        stopped_cells_a=_stopped(a, ta),
        stopped_cells_b=_stopped(b, tb),
    )


def _servers(trials: Sequence[TrialRecord | TrialRow]) -> CellServers:
    """What served each cell's completed trials (their records' provenance; compact rows hold none)."""
    out = CellServers()
    for t in trials:
        if isinstance(t, TrialRecord) and t.status == "completed":
            out.add(t.cell, t.provenance)
    return out


def _stopped(manifest: RunManifest, trials: Sequence[TrialRecord | TrialRow]) -> frozenset[str]:
    """The run's cells an adaptive rule stopped early, by the report's rule (needs the plan)."""
    return frozenset(stopped_cells(manifest, Counter(t.cell for t in completed_rows(_rows(trials)))))


def compare_cells(
    a: RunManifest,
    ca: CellTrials,
    b: RunManifest,
    cb: CellTrials,
    *,
    suspect_a: Sequence[str] = (),
    suspect_b: Sequence[str] = (),
    incomplete_a: str | None = None,
    incomplete_b: str | None = None,
    stopped_cells_a: Collection[str] = (),
    stopped_cells_b: Collection[str] = (),
    servers: tuple[CellServers, CellServers] | None = None,
    folders: tuple[Path | str, Path | str] = ("RUN_A", "RUN_B"),
) -> Comparison:
    """PURE: compare() from each run's cells as cell_trials summarises them (all a comparison
    needs of a run's trials: what write_comparison_page keeps of one run while it reads the other);
    `incomplete_a`/`incomplete_b`: report.build.incomplete_reason of each run, read with its rows;
    `stopped_cells_a`/`stopped_cells_b`: report.build.stopped_cells of each run (their rates take
    the report's anytime-valid interval); `servers`: what served each run's cells (report.unlike);
    `folders`: each run's folder as the user named it, for the command that resumes it."""
    common = [c for c in ca if c in cb]
    differs = unlike(a, b, servers)  # a metric defined otherwise in B measured something else: not compared
    metrics = {m: kind for m, kind in a.metrics.items() if m in b.metrics and m not in differs.metrics}
    methods: dict[str, str] = {}
    found: list[Row] = []
    for metric, kind in metrics.items():
        disp = _dispersion(ca, cb, metric) if kind == "proportion" else None
        methods[metric] = _method(disp)
        stops = [(cell in stopped_cells_a, cell in stopped_cells_b) for cell in common]
        found += [_row(cell, metric, kind, ca[cell], cb[cell], disp, s) for cell, s in zip(common, stops, strict=True)]
    rows = _holm_all(found)
    only_a = tuple(c for c in ca if c not in cb)
    only_b = tuple(c for c in cb if c not in ca)
    sides = (("A", a, suspect_a, incomplete_a, folders[0]), ("B", b, suspect_b, incomplete_b, folders[1]))
    warnings = tuple(line for side, m, reasons, gap, where in sides for line in _doubts(side, m, reasons, gap, where))
    return Comparison(a, b, tuple(rows), only_a, only_b, _summary(rows, a, b), warnings, methods, differs)


def _doubts(side: str, m: RunManifest, reasons: Sequence[str], incomplete: str | None, where: Path | str) -> list[str]:
    """One run's warnings: incomplete (it stopped early: with the command to paste that resumes
    it), then suspect (the report's cautions)."""
    found = []
    if incomplete:
        held = (
            "Its search stopped before its answer, so its configurations hold only the trials it got to"
            if m.hunt  # a hunt plans no trials past its first wave: none is "fewer than planned"
            else "Its cells hold fewer trials than planned and cells it never reached are missing here"
        )
        found.append(
            f"Run {m.run_id} ({side}) is incomplete: {incomplete}. {held}; resume it ({resume_command(where)}) "
            "before trusting this comparison."
        )
    if reasons:
        found.append(
            f"Run {m.run_id} ({side}) has suspect data: {'; '.join(reasons)}. A difference may come from "
            "that run's problems, not from the change; rerun it before trusting this comparison."
        )
    return found


def _holm_all(rows: Sequence[Row]) -> list[Row]:
    """Holm over every test on the page, every metric in one family (core.findings.adjust's policy):
    per-metric families would let a page with three metrics err up to three times alpha. Rows
    without a test (a side without data) or with too few trials to reach significance are not in
    the family and keep p_holm = 1."""
    tested = [i for i, r in enumerate(rows) if r.in_family]
    adjusted = dict(zip(tested, stats.holm([rows[i].p for i in tested]), strict=True)) if tested else {}
    return [replace(r, p_holm=adjusted.get(i, 1.0)) for i, r in enumerate(rows)]


def _dispersion(ca: CellTrials, cb: CellTrials, metric: str) -> clustered.Dispersion:
    """A proportion's trial-to-trial dispersion from every cell of both runs, each run's cell its own
    group (as the report pools it over a sweep's cells): a difference between the runs is not spread."""
    groups = [list(_of(cell, metric).counts) for side in (ca, cb) for cell in side.values()]
    return clustered.dispersion([g for g in groups if g])


def _method(disp: clustered.Dispersion | None) -> str:
    """The metric's test in words, as the report names it."""
    if disp is None:
        return "medians of trial values, Mann-Whitney test (the trial is the unit)"
    if not disp.estimable:
        return f"not tested ({disp.untested_reason()}); differences and intervals are descriptive only"
    return f"{disp.method()}; dispersion pooled over the cells of both runs"


@dataclass
class MetricTrials:
    """One metric over one cell's completed trials, in journal order: all a comparison counts."""

    trials: int = 0  # trials that have the metric
    counts: list[tuple[int, int]] = field(default_factory=list)  # (k, n) per trial with sessions of it
    values: list[float] = field(default_factory=list)  # a number's value per trial that has one
    finished: int = 0  # the cell's finished trials: completed, or failed for good (store.runtrials)


CellTrials = Mapping[str, Mapping[str, MetricTrials]]  # cell -> metric -> its trials
_NONE = MetricTrials()


def cell_trials(trials: Sequence[TrialRecord | TrialRow], metrics: Iterable[str]) -> dict[str, dict[str, MetricTrials]]:
    """Each cell's completed trials (one record per trial: a duplicated record counts once), cells
    in order of their first trial in the journal, summed up per metric of `metrics` (the run's).
    A few numbers a trial: a comparison holds these for one run while it reads the other."""
    rows = _rows(trials)
    names = frozenset(metrics)
    out: dict[str, dict[str, MetricTrials]] = {}
    for t in sorted(completed_rows(rows), key=lambda row: row.source):  # journal order, as before
        cell = out.setdefault(t.cell, {})
        for v in t.metrics:  # one point a name (a record's metrics are a mapping)
            if v.name in names:
                _add(cell.setdefault(v.name, MetricTrials()), v)
    finished = Counter(t.cell for t in trial_rows(rows))
    for cell_id, cell in out.items():
        for name in names:
            cell.setdefault(name, MetricTrials()).finished = finished[cell_id]
    return out


def _rows(trials: Sequence[TrialRecord | TrialRow]) -> list[TrialRow]:
    return [t if isinstance(t, TrialRow) else TrialRow.of(t, i) for i, t in enumerate(trials)]


def _add(into: MetricTrials, v: MetricPoint) -> None:
    into.trials += 1
    if v.n:
        into.counts.append((v.k or 0, v.n))
    if v.value is not None:
        into.values.append(float(v.value))


def _of(cell: Mapping[str, MetricTrials], metric: str) -> MetricTrials:
    return cell.get(metric, _NONE)


def _side(trials: MetricTrials, kind: str, disp: clustered.Dispersion | None, stopped: bool = False) -> Side:
    """One run's cell: pooled k/n with an interval widened by the dispersion (anytime-valid for a
    cell an adaptive rule stopped early, as its report: clustered.cell_rate), or a number's median."""
    if kind == "proportion":
        k, n = sum(c[0] for c in trials.counts), sum(c[1] for c in trials.counts)
        rate = clustered.cell_rate(k, n, disp, len(trials.counts), stopped=stopped)  # as its report
        return Side(trials.trials, k, n, rate, stopped=stopped)
    nums = tuple(trials.values)
    return Side(trials.trials, values=nums, median=stats.median_ci(nums) if nums else None)


def _row(
    cell: str,
    metric: str,
    kind: str,
    ca: Mapping[str, MetricTrials],
    cb: Mapping[str, MetricTrials],
    disp: clustered.Dispersion | None,
    stopped: tuple[bool, bool] = (False, False),
) -> Row:
    ta, tb = _of(ca, metric), _of(cb, metric)
    return replace(_tested_row(cell, metric, kind, ta, tb, disp, stopped), caution=_caution(kind, ta, tb))


def _caution(kind: str, ta: MetricTrials, tb: MetricTrials) -> str:
    """The report's mark (report.missing) when A's and B's cell lost unalike shares of their finished
    trials (failed for good, or completed without the metric): a cell that lost half its trials
    compared with one that lost none is compared over the trials each kept, which flatters the
    one that lost its hard ones. On every row, not only significant ones: the loss can hide a
    difference as well as make one."""

    def lost(side: str, t: MetricTrials) -> missing.Lost:
        measured = len(t.counts) if kind == "proportion" else len(t.values)
        return missing.Lost(side, max(0, t.finished - measured), t.finished)

    return missing.pair_mark(lost("A", ta), lost("B", tb))


def _tested_row(
    cell: str,
    metric: str,
    kind: str,
    ta: MetricTrials,
    tb: MetricTrials,
    disp: clustered.Dispersion | None,
    stopped: tuple[bool, bool] = (False, False),
) -> Row:
    a, b = _side(ta, kind, disp, stopped[0]), _side(tb, kind, disp, stopped[1])
    if kind == "proportion":
        assert a.k is not None and a.n is not None and b.k is not None and b.n is not None and disp is not None
        if not a.n or not b.n:
            return Row(cell, metric, kind, a, b, None, None, None, 1.0, tested=False)
        if not disp.estimable:  # as the report: nothing to test a change against, so no test
            low, high = stats.rate_difference_ci(b.k, b.n, a.k, a.n)
            return Row(cell, metric, kind, a, b, b.k / b.n - a.k / a.n, low, high, 1.0, tested=False)
        # B vs A exactly as the report tests a cell vs its baseline, at the trial level
        test = versus_baseline(b.k, b.n, a.k, a.n, disp, tb.counts, ta.counts)
        return Row(cell, metric, kind, a, b, test.diff, test.low, test.high, test.p)
    if not a.values or not b.values or a.median is None or b.median is None:
        return Row(cell, metric, kind, a, b, None, None, None, 1.0, tested=False)
    diff, p = b.median.estimate - a.median.estimate, ranks.mann_whitney(b.values, a.values)
    return Row(cell, metric, kind, a, b, diff, None, None, p, too_few=_too_few(len(a.values), len(b.values)))


def _too_few(m: int, n: int) -> str:
    """Why m vs n trial values cannot show a difference, or "": the Mann-Whitney test's smallest
    p (ties included) is not below alpha (ranks.mann_whitney_can_reach). Such a row's p of 1 read
    as "no difference" (the report says the same of its cells: report.build._untestable); it
    leaves the Holm family (Row.in_family), as core.family leaves it out of the report's."""
    if ranks.mann_whitney_can_reach(m, n, stats.ALPHA):
        return ""
    smallest = ranks.mann_whitney_smallest_p(m, n)
    return f"too few trials to show a difference: {m} vs {n}, the smallest p possible is {smallest:.2g}"


def _summary(rows: Sequence[Row], a: RunManifest, b: RunManifest) -> tuple[str, ...]:
    moved = [r for r in rows if r.significant]
    if not rows:
        return ("The runs have no cells in common: nothing to compare.",)
    tested = sum(r.in_family for r in rows)
    if not tested:  # "no cell differs" would read as a result: nothing was tested (the report's wording)
        return (
            f"No difference between {a.run_id} and {b.run_id} can be called significant or not: 0 comparisons "
            "could be tested (see each metric's method below); the differences shown are descriptive only.",
        )
    hopeless = _hopeless(rows)
    if not moved:
        return (
            f"No cell differs significantly between {a.run_id} and {b.run_id} ({tested} comparisons, "
            f"Holm-adjusted over all of them, every metric in one family: p >= {stats.ALPHA:g})." + hopeless,
        )
    out = [hopeless.strip()] if hopeless else []
    for r in moved:
        if r.kind == "proportion":
            out.append(
                f"{r.metric} in {r.cell}: {_pct(r.a.k, r.a.n)} in {a.run_id} vs {_pct(r.b.k, r.b.n)} "
                f"in {b.run_id}, difference {100 * (r.diff or 0):+.1f} pts "
                f"[{100 * (r.diff_low or 0):+.1f}, {100 * (r.diff_high or 0):+.1f}] (p={r.p_holm:.2g}, Holm)"
                + _said(r.caution)
            )
        else:
            unit = unit_of(r.metric, a, b)
            out.append(
                f"{r.metric} in {r.cell}: median {with_unit(r.a.median.estimate, unit)} vs "  # type: ignore[union-attr]
                f"{with_unit(r.b.median.estimate, unit)} (p={r.p_holm:.2g}, Holm)" + _said(r.caution)  # type: ignore[union-attr]
            )
    return tuple(out)


def _hopeless(rows: Sequence[Row]) -> str:
    """The summary's sentence on rows with too few trials for any difference to show (" " + it), or "":
    "no cell differs" must not be read as "no difference" where none could have been seen."""
    few = [r for r in rows if r.too_few]
    if not few:
        return ""
    metrics = ", ".join(dict.fromkeys(r.metric for r in few))
    return (
        f" {counted(len(few), 'comparison')} ({metrics}) {'has' if len(few) == 1 else 'have'} too few trials for any "
        "difference to reach significance (not counted in the Holm family): "
        "no difference is shown there either way (not evidence that it is unchanged); run more replicates."
    )


def _said(caution: str) -> str:
    return f" ({caution})" if caution else ""


def _pct(k: int | None, n: int | None) -> str:
    return f"{k}/{n} = {100 * (k or 0) / n:.1f}%" if n else "no data"


def write_comparison(run_a: Path, run_b: Path, out: Path | None = None) -> Path:
    return write_comparison_page(run_a, run_b, out).path


@dataclass(frozen=True)
class ComparisonPage:
    path: Path
    warnings: tuple[
        str, ...
    ]  # the suspect runs, then what else differed between them (report.unlike), for the terminal
    changes: tuple[str, ...] = ()  # B's nightly regression check against its earlier runs (flagged ones)


def write_comparison_page(run_a: Path, run_b: Path, out: Path | None = None) -> ComparisonPage:
    """Write the comparison page; return it with the warnings about suspect runs."""
    from orchestrator.report.page import csp, environment
    from orchestrator.store.manifest import load_manifest

    # both are runs, before minutes of reading one
    ids = [load_manifest(run, plan=False).run_id for run in (run_a, run_b)]
    if ids[0] == ids[1]:  # a page of "no cell differs" would be no answer either: it differs nowhere by construction
        raise UsageError(
            f"{run_a} and {run_b}: the same run ({ids[0]}): a run compared with itself differs nowhere",
            hint="compare two runs of one matrix, e.g. tonight's and last night's",
        )
    read_a, read_b = _read_run(run_a), _read_run(run_b)  # one after the other: one run's rows at a time
    model = compare_cells(
        read_a.manifest,
        read_a.cells,
        read_b.manifest,
        read_b.cells,
        suspect_a=read_a.suspect,
        suspect_b=read_b.suspect,
        incomplete_a=read_a.incomplete,
        incomplete_b=read_b.incomplete,
        stopped_cells_a=read_a.stopped,
        stopped_cells_b=read_b.stopped,
        servers=(read_a.servers, read_b.servers),
        folders=(run_a, run_b),
    )
    a, b = model.a, model.b
    if not model.rows:  # a page of "nothing to compare" is no answer: bad input, exit 2
        raise UsageError(
            f"{run_a} and {run_b}: nothing to compare: {_nothing_in_common(model)}{_refused_differences(model)}",
            hint="compare two runs of one matrix, e.g. tonight's and last night's",
        )
    nightly, earlier = _nightly(run_b)
    shown = model  # the page's title names both matrices when they differ (the template titles it c.a.name)
    if a.name != b.name:
        shown = replace(model, a=a.model_copy(update={"name": f"{a.name} vs {b.name}"}))
    html = environment().get_template("compare.html.j2").render(c=shown, nightly=nightly, earlier=earlier, csp=csp(""))
    target = out or ReportsDir(run_a.parent).compare_page(a.run_id, b.run_id)
    page = write_text_atomic(target, html, what="cannot write the report", user_path=out is not None)
    warnings = model.warnings + model.differences
    return ComparisonPage(page, warnings, tuple(line for line, flagged in nightly if flagged))


@dataclass(frozen=True)
class _ReadRun:
    manifest: RunManifest  # without its planned trials (100,000 of them: ~130 MB as models)
    cells: CellTrials
    suspect: list[str]
    incomplete: str | None  # report.build.incomplete_reason: it stopped with planned trials unfinished
    stopped: frozenset[str]  # report.build.stopped_cells: cells an adaptive rule stopped early
    servers: CellServers  # what served each cell: a few digests a cell, each text once


def _read_run(run_dir: Path) -> _ReadRun:
    """What a comparison keeps of one run: its cells' counts and values (a few numbers a trial),
    its reasons to doubt its data, its manifest without the plan. Its compact rows (a damaged
    journal is refused as they are read) and the plan are let go before the other run is read:
    held for both runs at once, `orch compare` of two 100,000-trial runs needed twice one report."""
    from orchestrator.store.manifest import load_manifest

    manifest = load_manifest(run_dir)
    scan = read_run_rows(run_dir, manifest)
    suspect = _suspect(run_dir, manifest, scan)
    cells = cell_trials(scan.rows, manifest.metrics)
    incomplete = incomplete_reason(manifest, scan.rows, scan.stopped)  # needs the plan, let go below
    stopped = _stopped(manifest, scan.rows)  # so does this
    servers = _served_cells(RunDir(run_dir).journal, scan.rows)
    return _ReadRun(manifest.model_copy(update={"plan": []}), cells, suspect, incomplete, stopped, servers)


def _served_cells(journal: Path, rows: Sequence[TrialRow]) -> CellServers:
    """What served each cell's completed trials: their records' provenance tails in the journal
    (report.provenance.scan_journal, each distinct tail parsed once; a failed attempt's is not read)."""
    done = completed_rows(rows)
    cell_of = {r.trial: r.cell for r in done}
    out = CellServers()
    for trial, provenance in scan_journal(journal, offsets={r.source for r in done if r.line}):
        out.add(cell_of[trial], provenance)
    return out


def _suspect(run_dir: Path, manifest: RunManifest, scan: TrialRows) -> list[str]:
    """The run's reasons to doubt its data, from its rows (the report's words; full records only
    for the failures it names, at most build.FAILURE_CAP)."""
    from orchestrator.report.build import build_report_from_rows, suspect_reasons
    from orchestrator.store.journal import read_records_at

    journal = RunDir(run_dir).journal
    report = build_report_from_rows(
        manifest,
        scan.rows,
        lambda rows: read_records_at(journal, rows) if rows else [],
        torn_tail=scan.torn_tail,
        drilldown_cap=0,
    )
    return suspect_reasons(report)


# what else differed, said in a refusal: the first few, each cut, and how many more (a hunt against
# a sweep differed in every host fact: its refusal was one line of ~3,000 characters)
DIFFERENCES_NAMED = 3
DIFFERENCE_CHARS = 200


def _refused_differences(model: Comparison) -> str:
    """'; ' and the first DIFFERENCES_NAMED differences, each cut at DIFFERENCE_CHARS, then 'and N more'."""
    lines = model.differences
    said = [clip(line, DIFFERENCE_CHARS) for line in lines[:DIFFERENCES_NAMED]]
    if len(lines) > DIFFERENCES_NAMED:
        said.append(f"and {counted(len(lines) - DIFFERENCES_NAMED, 'more difference')}")
    return "".join(f"; {line}" for line in said)


def _nothing_in_common(model: Comparison) -> str:
    """Why a comparison has no rows."""
    if not (set(model.a.metrics) & set(model.b.metrics)) - set(model.unlike.metrics):
        return "the runs measure no metric in common" + (" defined alike" if model.unlike.metrics else "")
    if not model.only_a and not model.only_b:
        return "neither run has a completed trial"
    if not model.only_a or not model.only_b:
        return f"run {'A' if not model.only_a else 'B'} has no completed trial"
    return "the runs have no cell in common (with completed trials)"


def _nightly(run_b: Path) -> tuple[list[tuple[str, bool]], int]:
    """B against the earlier runs of its matrix + inventory in its reports folder (the index's
    nightly check): (text, flagged) per checked cell and metric, flagged first, and how many
    earlier runs it used (the most any pair had): the page names that number, not the lookback's
    "up to 7", so one earlier run is never read as a week of them."""
    from orchestrator.report.render import fresh_summary
    from orchestrator.report.site import regression_changes
    from orchestrator.report.trends import change_text

    changes = regression_changes(run_b, fresh_summary)
    return [(change_text(c), c.flagged) for c in changes], max((c.nights for c in changes), default=0)
