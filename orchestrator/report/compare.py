"""`orch compare RUN_A RUN_B`: two runs side by side, matching cells by their factor levels.

The question it answers: "did this change (a new build, a driver, another cluster) move the
metric, cell by cell, beyond noise?" Each common cell gets both rates with Wilson intervals, the
difference B - A with a Newcombe interval, and a Fisher exact p-value, Holm-adjusted across the
cells of a metric; numeric metrics get medians and a Mann-Whitney test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from orchestrator.core import stats
from orchestrator.core.records import RunManifest, TrialRecord
from orchestrator.store.atomic import write_text_atomic
from orchestrator.store.rundir import ReportsDir


@dataclass(frozen=True)
class Side:
    trials: int
    k: int | None = None
    n: int | None = None
    rate: stats.Interval | None = None
    values: tuple[float, ...] = ()
    median: stats.Interval | None = None


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

    @property
    def significant(self) -> bool:
        return self.p_holm < stats.ALPHA


@dataclass(frozen=True)
class Comparison:
    a: RunManifest
    b: RunManifest
    rows: tuple[Row, ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    summary: tuple[str, ...]
    warnings: tuple[str, ...] = ()  # one per suspect run: which run and why, shown above the result


def compare(
    a: RunManifest,
    ta: Sequence[TrialRecord],
    b: RunManifest,
    tb: Sequence[TrialRecord],
    *,
    suspect_a: Sequence[str] = (),
    suspect_b: Sequence[str] = (),
) -> Comparison:
    """PURE: the comparison model. Only completed trials count. `suspect_a`/`suspect_b` are
    each run's reasons to doubt its data (report.build.suspect_reasons): a difference against a
    run whose trials were void or drifting may be that run's fault, not the change's."""
    ca, cb = _by_cell(ta), _by_cell(tb)
    common = [c for c in ca if c in cb]
    metrics = {**a.metrics, **b.metrics}
    rows: list[Row] = []
    for metric, kind in metrics.items():
        if metric not in a.metrics or metric not in b.metrics:
            continue
        metric_rows = [_row(cell, metric, kind, ca[cell], cb[cell]) for cell in common]
        adjusted = stats.holm([r.p for r in metric_rows]) if metric_rows else []
        rows += [Row(**{**r.__dict__, "p_holm": p}) for r, p in zip(metric_rows, adjusted, strict=True)]
    only_a = tuple(c for c in ca if c not in cb)
    only_b = tuple(c for c in cb if c not in ca)
    warnings = tuple(
        f"Run {m.run_id} ({side}) has suspect data: {'; '.join(reasons)}. A difference may come from "
        "that run's problems, not from the change; rerun it before trusting this comparison."
        for side, m, reasons in (("A", a, suspect_a), ("B", b, suspect_b))
        if reasons
    )
    return Comparison(a, b, tuple(rows), only_a, only_b, _summary(rows, a, b), warnings)


def _by_cell(trials: Sequence[TrialRecord]) -> dict[str, list[TrialRecord]]:
    out: dict[str, list[TrialRecord]] = {}
    for t in trials:
        if t.status == "completed":
            out.setdefault(t.cell, []).append(t)
    return out


def _side(trials: list[TrialRecord], metric: str, kind: str) -> Side:
    values = [t.metrics[metric] for t in trials if metric in t.metrics]
    if kind == "proportion":
        k, n = sum(v.k or 0 for v in values), sum(v.n or 0 for v in values)
        return Side(len(values), k, n, stats.rate(k, n))
    nums = tuple(float(v.value) for v in values if v.value is not None)
    return Side(len(values), values=nums, median=stats.median_ci(nums) if nums else None)


def _row(cell: str, metric: str, kind: str, ta: list[TrialRecord], tb: list[TrialRecord]) -> Row:
    a, b = _side(ta, metric, kind), _side(tb, metric, kind)
    if kind == "proportion":
        assert a.k is not None and a.n is not None and b.k is not None and b.n is not None
        if not a.n or not b.n:
            return Row(cell, metric, kind, a, b, None, None, None, 1.0)
        low, high = stats.rate_difference_ci(b.k, b.n, a.k, a.n)
        return Row(cell, metric, kind, a, b, b.k / b.n - a.k / a.n, low, high, stats.fisher_exact(b.k, b.n, a.k, a.n))
    if not a.values or not b.values or a.median is None or b.median is None:
        return Row(cell, metric, kind, a, b, None, None, None, 1.0)
    return Row(
        cell,
        metric,
        kind,
        a,
        b,
        b.median.estimate - a.median.estimate,
        None,
        None,
        stats.mann_whitney(b.values, a.values),
    )


def _summary(rows: Sequence[Row], a: RunManifest, b: RunManifest) -> tuple[str, ...]:
    moved = [r for r in rows if r.significant]
    if not rows:
        return ("The runs have no cells in common: nothing to compare.",)
    if not moved:
        return (
            f"No cell differs significantly between {a.run_id} and {b.run_id} "
            f"({len(rows)} comparisons, Holm-adjusted p >= 0.05).",
        )
    out = []
    for r in moved:
        if r.kind == "proportion":
            out.append(
                f"{r.metric} in {r.cell}: {_pct(r.a.k, r.a.n)} in {a.run_id} vs {_pct(r.b.k, r.b.n)} "
                f"in {b.run_id}, difference {100 * (r.diff or 0):+.1f} pts "
                f"[{100 * (r.diff_low or 0):+.1f}, {100 * (r.diff_high or 0):+.1f}] (p={r.p_holm:.2g}, Holm)"
            )
        else:
            out.append(
                f"{r.metric} in {r.cell}: median {r.a.median.estimate:g} vs {r.b.median.estimate:g} "  # type: ignore[union-attr]
                f"(p={r.p_holm:.2g}, Holm)"
            )
    return tuple(out)


def _pct(k: int | None, n: int | None) -> str:
    return f"{k}/{n} = {100 * (k or 0) / n:.1f}%" if n else "no data"


def write_comparison(run_a: Path, run_b: Path, out: Path | None = None) -> Path:
    return write_comparison_page(run_a, run_b, out).path


@dataclass(frozen=True)
class ComparisonPage:
    path: Path
    warnings: tuple[str, ...]  # the suspect runs, for the terminal too
    changes: tuple[str, ...] = ()  # B's nightly regression check against its earlier runs (flagged ones)


def write_comparison_page(run_a: Path, run_b: Path, out: Path | None = None) -> ComparisonPage:
    """Write the comparison page; return it with the warnings about suspect runs."""
    from orchestrator.report.build import build_report, suspect_reasons
    from orchestrator.report.render import csp, environment, load_trials
    from orchestrator.store.manifest import load_manifest

    a, b = load_manifest(run_a), load_manifest(run_b)
    (ta, torn_a), (tb, torn_b) = load_trials(run_a), load_trials(run_b)
    suspect_a = suspect_reasons(build_report(a, ta, torn_tail=torn_a, drilldown_cap=0))
    suspect_b = suspect_reasons(build_report(b, tb, torn_tail=torn_b, drilldown_cap=0))
    model = compare(a, ta, b, tb, suspect_a=suspect_a, suspect_b=suspect_b)
    nightly = _nightly(run_b)
    html = environment().get_template("compare.html.j2").render(c=model, nightly=nightly, csp=csp(""))
    target = out or ReportsDir(run_a.parent).compare_page(a.run_id, b.run_id)
    page = write_text_atomic(target, html, what="cannot write the report")
    return ComparisonPage(page, model.warnings, tuple(line for line, flagged in nightly if flagged))


def _nightly(run_b: Path) -> list[tuple[str, bool]]:
    """B against the earlier runs of its matrix + inventory in its reports folder (the index's
    nightly check): (text, flagged) per checked cell and metric, flagged first."""
    from orchestrator.report.site import regression_changes
    from orchestrator.report.trends import change_text

    return [(change_text(c), c.flagged) for c in regression_changes(run_b)]
