"""Report model -> one self-contained HTML page; run directory -> index.html on disk.

Why so strict: a report is evidence passed around by mail and opened offline, and its text
comes from repro output and logs that can contain anything (`<script>`, `{{ 7*7 }}`). So:
jinja2 autoescape is on for every value; the only unescaped pieces are the SVG charts (written by
report/svgchart.py from numbers and escaped labels) and the fixed script below; a Content-Security-Policy
allows exactly that script (by hash) and nothing from any URL, so even a missed escape could not
load or run anything. No CDN, no web font, no favicon request.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from markupsafe import Markup

from orchestrator.core.clip import clip_list
from orchestrator.core.config import MAX_TITLE
from orchestrator.core.gcpause import gc_paused
from orchestrator.core.records import EventRecord, RunManifest, TrialRecord
from orchestrator.report import charts, page
from orchestrator.report.build import (
    DRILLDOWN_CAP,
    build_report_from_rows,
    fmt_num,
    fmt_p,
    fmt_pct,
    fmt_pts,
    fmt_rate,
    result_headline,
    stopped_in,
    stopped_note,
    suspect_reasons,
    with_adaptive_facts,
    with_served,
)
from orchestrator.report.gates import check_gates, failed_names
from orchestrator.report.hostfacts import host_fact_findings
from orchestrator.report.model import CellView, HuntView, Report
from orchestrator.report.provenance import scan_journal, served
from orchestrator.report.series import SeriesPoint, run_series
from orchestrator.report.servedsettings import served_setting_findings
from orchestrator.report.summary import RunSummary
from orchestrator.report.testbeds import testbed_findings
from orchestrator.store.atomic import write_json_atomic, write_text_atomic
from orchestrator.store.journal import TrialRow, iter_records, read_records_at
from orchestrator.store.liveness import StatusFile, read_status, recorded_restore, state_of
from orchestrator.store.manifest import load_manifest
from orchestrator.store.rundir import RunDir
from orchestrator.store.runtrials import read_run_rows

if TYPE_CHECKING:  # the search (numpy, scipy): loaded only for a hunt run
    from orchestrator.report.hunt import HuntReport

TRIAL_ORDER_SHOWN = 2000
# roles the page and summary.json name as left changed: status.json is read bounded (a MiB), and a
# testbed has a few hosts; more than this is a damaged file, cut with the count of the rest shown
ROLES_SHOWN = 200

# Sortable tables (click a header) and expand/collapse-all for the trial drill-down.
SCRIPT = """
(function () {
  function key(cell) {
    var v = cell.getAttribute('data-sort');
    if (v === null) { return cell.textContent.trim().toLowerCase(); }
    var n = parseFloat(v);
    return isNaN(n) ? v : n;
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    table.querySelectorAll('th').forEach(function (th, col) {
      th.addEventListener('click', function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var up = th.getAttribute('aria-sort') !== 'ascending';
        table.querySelectorAll('th').forEach(function (h) { h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', up ? 'ascending' : 'descending');
        rows.sort(function (a, b) {
          var x = key(a.cells[col]), y = key(b.cells[col]);
          if (typeof x !== typeof y) { x = String(x); y = String(y); }
          return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  document.querySelectorAll('button[data-toggle]').forEach(function (button) {
    button.addEventListener('click', function () {
      var open = button.getAttribute('data-toggle') === 'open';
      document.querySelectorAll(button.getAttribute('data-target') + ' details')
        .forEach(function (d) { d.open = open; });
    });
  });
})();
"""


@functools.cache
def _environment() -> jinja2.Environment:
    """The pages' environment (report.page) with the filters report.html.j2 formats numbers with;
    one per process, for the reason page.environment gives."""
    env = page.new_environment()
    env.filters.update(pct=fmt_pct, rate=fmt_rate, p=fmt_p, pts=fmt_pts, num=fmt_num)
    return env


def render_report(report: Report) -> str:
    """The whole page as a string (charts drawn here, from the model)."""
    primary = report.primary_metric
    proportions = [m for m, k in report.metrics.items() if k == "proportion"]
    numbers = [m for m, k in report.metrics.items() if k == "number"]
    figures = {
        "rates": [(m, charts.rate_chart(report, m)) for m in proportions],
        "effects": [(m, charts.effects_chart(report, m)) for m in proportions],
        "numbers": [(m, charts.number_chart(report, m)) for m in numbers],
    }
    template = _environment().get_template("report.html.j2")
    return template.render(
        r=report,
        primary=primary,
        proportions=proportions,
        numbers=numbers,
        figures={k: [(m, Markup(svg)) for m, svg in v if svg] for k, v in figures.items()},
        script=Markup(SCRIPT),
        csp=page.csp(SCRIPT),
        trial_order=report.provenance.trial_order[:TRIAL_ORDER_SHOWN],
        gate_results=check_gates(report),
        stopped_note=stopped_note(report),
    )


def group_key(matrix_sha256: str, inventory_sha256: str) -> str:
    """Runs of the same matrix on the same inventory: what the index trends and compares."""
    return hashlib.sha256(f"{matrix_sha256}:{inventory_sha256}".encode()).hexdigest()[:16]


def run_summary(report: Report, series: Sequence[SeriesPoint] = ()) -> RunSummary:
    """The result (not the status instead of it), why the data may be suspect, and the gates."""
    results = check_gates(report)
    prov = report.provenance
    return RunSummary(
        group=group_key(prov.matrix_sha256, prov.inventory_sha256),
        testbed=prov.testbed,
        series=_marked_stopped(report, series),
        gates=len(results),
        gates_failed=failed_names(results),
        headline=result_headline(report),
        adaptive=report.adaptive,
        completed=report.completed,
        planned=report.planned,
        failed=report.failed,
        status=report.status,
        suspect=tuple(suspect_reasons(report)),
        not_restored=report.not_restored,
        restore_with=report.restore_with,
    )


def _marked_stopped(report: Report, series: Sequence[SeriesPoint]) -> list[SeriesPoint]:
    """The series with the cells the report shows as stopped early (report.build.stopped_cells)
    marked, so the runs index's trends give them the report's interval, not a narrower one; and,
    for a metric whose series kept only the newest MAX_TRIALS trials of some cell, every cell's
    interval as the report shows it (the kept trials give another rate and another dispersion: a
    cell of 70 trials was trended at 1.6% [1.0%, 2.5%] where its report said 3.6% [2.4%, 5.2%]);
    and each number metric's unit, which the journal's rows do not carry (the run's manifest does)."""
    stopped = set(stopped_in(report))
    cells = {c.cell: c for c in report.cells}
    cut = {p.metric for p in series if p.kind == "proportion" and _cut(cells.get(p.cell), p)}
    marked = []
    for p in series:
        update: dict[str, object] = {"stopped": True} if p.cell in stopped else {}
        view = cells[p.cell].proportions.get(p.metric) if p.metric in cut and p.cell in cells else None
        if view is not None and view.rate.rate is not None:
            update["shown"] = (view.rate.rate, view.rate.low, view.rate.high)
        if p.kind == "number" and report.units.get(p.metric):
            update["unit"] = report.units[p.metric]
        marked.append(p.model_copy(update=update) if update else p)
    return marked


def _cut(cell: CellView | None, point: SeriesPoint) -> bool:
    """The point kept fewer trials than the report's cell holds (report.series.MAX_TRIALS)."""
    view = None if cell is None else cell.proportions.get(point.metric)
    return view is not None and len(point.trials) < view.trials


def write_report(run_dir: Path) -> Path:
    """Load run.json and the journal, render, write run_dir/index.html atomically."""
    return write_report_and_summary(run_dir)[0]


def write_report_and_summary(run_dir: Path) -> tuple[Path, RunSummary]:
    """write_report, also returning the summary written beside it (headline, gates). A hunt run
    gets its hunt.html too, whoever writes the report (`orch hunt`, `orch report`, the queue):
    the queue's hunts had none."""
    manifest = load_manifest(run_dir)
    hunt = _hunt_of(run_dir, manifest)
    report, rows = load_report_and_rows(run_dir, DRILLDOWN_CAP, manifest, hunt=_view(hunt))
    run = RunDir(run_dir)
    if hunt is not None:
        from orchestrator.report.hunt import render as render_hunt

        page = render_hunt(hunt, not_restored=report.not_restored, restore_with=report.restore_with)
        write_text_atomic(run.hunt_html, page, what="cannot write the hunt report")
    written = write_text_atomic(run.index_html, render_report(report), what="cannot write the report")
    summary = run_summary(report, run_series(rows))
    write_json_atomic(run.summary_json, summary)  # the index trusts it only when newer than the inputs
    return written, summary


def fresh_summary(run_dir: Path, manifest: RunManifest | None = None) -> RunSummary:
    """The run's summary rebuilt from its journal (no page rendered): for the index, when
    summary.json is missing or older than the run's files (`manifest`: when already loaded)."""
    report, rows = load_report_and_rows(run_dir, 0, manifest)
    return run_summary(report, run_series(rows))


def load_report(run_dir: Path, *, drilldown_cap: int = DRILLDOWN_CAP) -> Report:
    """The report model of a run on disk; equal to build_report(manifest, load_trials(...)).

    Streams the journal into compact rows and reads full records back only for the trials the
    page shows in detail: a 100,000-trial run renders in seconds, in a few hundred MB."""
    return load_report_and_rows(run_dir, drilldown_cap)[0]


def hunt_view(run_dir: Path, manifest: RunManifest) -> HuntView | None:
    """A hunt run's answer as its report and every quote of its result show it (None: not a
    hunt, or its matrix text cannot be read: report.hunt.hunt_report's `lenient`)."""
    return _view(_hunt_of(run_dir, manifest))


def _view(hunt: HuntReport | None) -> HuntView | None:
    if hunt is None:
        return None
    from orchestrator.report.hunt import view  # loaded with the hunt already

    return view(hunt)


def _hunt_of(run_dir: Path, manifest: RunManifest) -> HuntReport | None:
    if not manifest.hunt:
        return None
    from orchestrator.report.hunt import hunt_report  # the search (numpy, scipy): only for a hunt

    return hunt_report(run_dir, manifest, lenient=True)


def load_report_and_rows(
    run_dir: Path, drilldown_cap: int, manifest: RunManifest | None = None, *, hunt: HuntView | None = None
) -> tuple[Report, list[TrialRow]]:
    """load_report, and the compact trial rows it was built from, checked by store.runtrials'
    rule (for summary.json's series, and the webhook's counts of finished and failed trials).
    A hunt run's report carries the hunt's answer as its result: `hunt` when already built, else
    hunt_view's (every reader of a hunt run quotes its verdict, never the cells' comparisons)."""
    with gc_paused():
        manifest = manifest or load_manifest(run_dir)
        hunt = hunt or hunt_view(run_dir, manifest)
        left = read_status(run_dir)  # its controller, and the hosts its restore left changed, if any
        state = state_of(manifest.status, left)  # `stale` when its controller is gone
        path = RunDir(run_dir).journal
        if not path.exists():
            empty = build_report_from_rows(
                manifest, [], lambda rows: [], drilldown_cap=drilldown_cap, status=state, hunt=hunt
            )
            return with_left_changed(empty, run_dir, left), []
        scan = read_run_rows(run_dir, manifest)  # damage (duplicates, unplanned trials) refused at its line
        report = build_report_from_rows(
            manifest,
            scan.rows,
            lambda rows: read_records_at(path, rows),
            torn_tail=scan.torn_tail,
            drilldown_cap=drilldown_cap,
            status=state,
            hunt=hunt,
        )
        report = with_served(report, served(scan_journal(path), manifest.redactor))  # what served each trial
        return with_left_changed(_with_run_facts(report, manifest, path), run_dir, left), scan.rows


def with_left_changed(report: Report, run_dir: Path, status: StatusFile | None) -> Report:
    """The report with the hosts the run's restore left changed, as its status.json says now (None:
    none, or unreadable). Why status.json: it is the one source the runs index, `orch status`, the
    serve pages and the webhook read, so the page and summary.json, which state it as of their
    writing, cannot say otherwise; `orch restore` writes both again once it changed what is left."""
    if status is None or not status.not_restored:
        return report
    roles = tuple(clip_list(status.not_restored, ROLES_SHOWN, MAX_TITLE))
    command = recorded_restore(status.restore_with, run_dir.absolute())  # any folder's, never cut
    return report.model_copy(update={"not_restored": roles, "restore_with": command})


def _with_run_facts(report: Report, manifest: RunManifest, path: Path) -> Report:
    """Adaptive decisions, whether testbeds differ and the server settings they served a cell with
    otherwise (report.servedsettings) and, beside it, the host facts the trials were not alike in
    (report.hostfacts, from run.json alone): only parallel or adaptive runs pay for the journal's scan."""
    parallel = len(manifest.testbeds) > 1
    extra = []
    if parallel or manifest.adaptive:
        records = list(iter_records(path))
        trials = [r for r in records if isinstance(r, TrialRecord)]
        events = [r for r in records if isinstance(r, EventRecord)]
        numbers = [m for m, kind in report.metrics.items() if kind == "number"]
        report = with_adaptive_facts(report, events, adaptive=manifest.adaptive)
        if parallel:
            extra = [
                *testbed_findings(trials, report.primary_metric, numbers),
                *served_setting_findings(manifest, trials),
            ]
    extra += host_fact_findings(manifest)
    return report.model_copy(update={"headline": [*report.headline, *extra]}) if extra else report
