"""`orch compare` as of d0e5505, kept verbatim (not a test module): both runs' manifests (with
their plans) and compact rows held at once, each cell's trials as lists of rows.
tests/test_compare_memory.py checks that the comparison that reads one run at a time writes the
same page, and bench/bench_memory.py measures both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from orchestrator.core import clustered, ranks, stats
from orchestrator.core.clustered import widened_rate
from orchestrator.core.records import RunManifest, TrialRecord
from orchestrator.errors import UsageError
from orchestrator.report.build import versus_baseline
from orchestrator.report.compare import (
    Comparison,
    ComparisonPage,
    Row,
    Side,
    _holm_all,
    _method,
    _nightly,
    _nothing_in_common,
    _summary,
    _suspect,
    _too_few,
)
from orchestrator.store.atomic import write_text_atomic
from orchestrator.store.journal import MetricPoint, TrialRow
from orchestrator.store.rundir import ReportsDir
from orchestrator.store.runtrials import completed_rows, read_run_rows


def compare(
    a: RunManifest,
    ta: Sequence[TrialRecord | TrialRow],
    b: RunManifest,
    tb: Sequence[TrialRecord | TrialRow],
    *,
    suspect_a: Sequence[str] = (),
    suspect_b: Sequence[str] = (),
) -> Comparison:
    ca, cb = _by_cell(ta), _by_cell(tb)
    common = [c for c in ca if c in cb]
    metrics = {m: kind for m, kind in {**a.metrics, **b.metrics}.items() if m in a.metrics and m in b.metrics}
    methods: dict[str, str] = {}
    found: list[Row] = []
    for metric, kind in metrics.items():
        disp = _dispersion(ca, cb, metric) if kind == "proportion" else None
        methods[metric] = _method(disp)
        found += [_row(cell, metric, kind, ca[cell], cb[cell], disp) for cell in common]
    rows = _holm_all(found)
    only_a = tuple(c for c in ca if c not in cb)
    only_b = tuple(c for c in cb if c not in ca)
    warnings = tuple(
        f"Run {m.run_id} ({side}) has suspect data: {'; '.join(reasons)}. A difference may come from "
        "that run's problems, not from the change; rerun it before trusting this comparison."
        for side, m, reasons in (("A", a, suspect_a), ("B", b, suspect_b))
        if reasons
    )
    return Comparison(a, b, tuple(rows), only_a, only_b, _summary(rows, a, b), warnings, methods)


def _dispersion(ca: dict[str, list[TrialRow]], cb: dict[str, list[TrialRow]], metric: str) -> clustered.Dispersion:
    groups = [_counts(trials, metric) for side in (ca, cb) for trials in side.values()]
    return clustered.dispersion([g for g in groups if g])


def _counts(trials: Sequence[TrialRow], metric: str) -> list[tuple[int, int]]:
    out = []
    for t in trials:
        v = _metric(t, metric)
        if v is not None and v.n:
            out.append((v.k or 0, v.n))
    return out


def _metric(trial: TrialRow, name: str) -> MetricPoint | None:
    return next((m for m in trial.metrics if m.name == name), None)


def _by_cell(trials: Sequence[TrialRecord | TrialRow]) -> dict[str, list[TrialRow]]:
    rows = [t if isinstance(t, TrialRow) else TrialRow.of(t, i) for i, t in enumerate(trials)]
    out: dict[str, list[TrialRow]] = {}
    for t in sorted(completed_rows(rows), key=lambda row: row.source):  # journal order, as before
        out.setdefault(t.cell, []).append(t)
    return out


def _side(trials: list[TrialRow], metric: str, kind: str, disp: clustered.Dispersion | None) -> Side:
    values = [v for v in (_metric(t, metric) for t in trials) if v is not None]
    if kind == "proportion":
        counts = _counts(trials, metric)
        k, n = sum(c[0] for c in counts), sum(c[1] for c in counts)
        return Side(len(values), k, n, widened_rate(k, n, disp))
    nums = tuple(float(v.value) for v in values if v.value is not None)
    return Side(len(values), values=nums, median=stats.median_ci(nums) if nums else None)


def _row(
    cell: str, metric: str, kind: str, ta: list[TrialRow], tb: list[TrialRow], disp: clustered.Dispersion | None
) -> Row:
    a, b = _side(ta, metric, kind, disp), _side(tb, metric, kind, disp)
    if kind == "proportion":
        assert a.k is not None and a.n is not None and b.k is not None and b.n is not None and disp is not None
        if not a.n or not b.n:
            return Row(cell, metric, kind, a, b, None, None, None, 1.0, tested=False)
        if not disp.estimable:
            low, high = stats.rate_difference_ci(b.k, b.n, a.k, a.n)
            return Row(cell, metric, kind, a, b, b.k / b.n - a.k / a.n, low, high, 1.0, tested=False)
        test = versus_baseline(b.k, b.n, a.k, a.n, disp, _counts(tb, metric), _counts(ta, metric))
        return Row(cell, metric, kind, a, b, test.diff, test.low, test.high, test.p)
    if not a.values or not b.values or a.median is None or b.median is None:
        return Row(cell, metric, kind, a, b, None, None, None, 1.0, tested=False)
    return Row(
        cell,
        metric,
        kind,
        a,
        b,
        b.median.estimate - a.median.estimate,
        None,
        None,
        ranks.mann_whitney(b.values, a.values),
        too_few=_too_few(len(a.values), len(b.values)),  # not of d0e5505: the page's rows say it since
    )


def matrix_mismatch(a: RunManifest, b: RunManifest) -> str | None:
    """Why the two runs are not runs of one matrix, or None when they are (orch compare's own words
    for it are report.unlike's since)."""
    if a.name != b.name:
        return f"A = {a.run_id} is a run of matrix {a.name!r}, B = {b.run_id} of matrix {b.name!r}"
    if a.matrix_sha256 != b.matrix_sha256:
        return f"matrix {a.name!r} changed between A = {a.run_id} and B = {b.run_id} (its file differs)"
    return None


def write_comparison_page(run_a: Path, run_b: Path, out: Path | None = None) -> ComparisonPage:
    from orchestrator.report.page import csp, environment
    from orchestrator.store.manifest import load_manifest

    a, b = load_manifest(run_a), load_manifest(run_b)
    ta, tb = read_run_rows(run_a, a), read_run_rows(run_b, b)
    suspect_a, suspect_b = _suspect(run_a, a, ta), _suspect(run_b, b, tb)
    model = compare(a, ta.rows, b, tb.rows, suspect_a=suspect_a, suspect_b=suspect_b)
    mismatch = matrix_mismatch(a, b)
    if not model.rows:
        raise UsageError(
            f"{run_a} and {run_b}: nothing to compare: {_nothing_in_common(model)}"
            + (f"; {mismatch}" if mismatch else ""),
            hint="compare two runs of one matrix, e.g. tonight's and last night's",
        )
    nightly, earlier = _nightly(run_b)  # not of d0e5505: the page names how many earlier runs it used since
    shown = model
    if a.name != b.name:
        shown = replace(model, a=a.model_copy(update={"name": f"{a.name} vs {b.name}"}))
    html = environment().get_template("compare.html.j2").render(c=shown, nightly=nightly, earlier=earlier, csp=csp(""))
    target = out or ReportsDir(run_a.parent).compare_page(a.run_id, b.run_id)
    page = write_text_atomic(target, html, what="cannot write the report", user_path=out is not None)
    warnings = model.warnings + ((f"{mismatch}: only the cells both ran are compared",) if mismatch else ())
    return ComparisonPage(page, warnings, tuple(line for line, flagged in nightly if flagged))
