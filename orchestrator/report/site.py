"""reports/index.html: one line per run (name, date, status, headline, link to its report), and
a visible warning on a run whose data is suspect (void or failed trials, drift, overdispersion).

Why read each run's summary.json: rebuilding every report to list it would cost seconds per big
run. render.py writes summary.json beside the run's index.html; it is used when it is newer than
the run's journal and manifest, and the summary is rebuilt (not rendered) when it is missing or
stale, by the Rebuild the caller passes (render.fresh_summary): the index lists runs, the report
build is not its business, so it does not import it (report.summary). A run that cannot be read
is listed with the reason, never skipped and never fatal: the index is where one goes to find
out what happened.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pydantic
from markupsafe import Markup

from orchestrator.core.bounded import read_bounded_bytes
from orchestrator.core.clip import clip, clip_list
from orchestrator.core.config import MAX_TITLE
from orchestrator.core.regression import Change
from orchestrator.errors import OrchError
from orchestrator.report.page import csp, environment
from orchestrator.report.series import SeriesPoint
from orchestrator.report.summary import Rebuild, RunSummary
from orchestrator.report.trends import USABLE, GroupTrend, NightRun, change_text, group_trends, regression_check
from orchestrator.store.atomic import write_text_atomic
from orchestrator.store.liveness import STALE, read_status, recorded_restore, run_state
from orchestrator.store.manifest import load_manifest
from orchestrator.store.rundir import HUNT_HTML, ReportsDir, RunDir

# Filters for the runs table (matrix, testbed, status); allowed by hash in the page's CSP.
INDEX_SCRIPT = """
(function () {
  var selects = document.querySelectorAll('select[data-filter]');
  function apply() {
    document.querySelectorAll('#runs tbody tr[data-matrix]').forEach(function (row) {
      var show = true;
      selects.forEach(function (s) {
        if (s.value && row.getAttribute('data-' + s.getAttribute('data-filter')) !== s.value) { show = false; }
      });
      row.hidden = !show;
    });
  }
  selects.forEach(function (s) { s.addEventListener('change', apply); });
})();
"""
SUMMARY_BYTES = 4 * 1024 * 1024  # a summary with its series is at most a few hundred KB (report.series caps)
# runs the index's table lists, newest first: 2,000 run folders made a 1.8 MB page rendered on
# every `orch serve /` and after every run; the older ones are counted (/api/runs pages through all)
INDEX_ROWS = 500
# what a run folder may show of itself in the index and /api/runs: run.json, summary.json and
# status.json are read bounded (MiBs), not small (20 runs named 1 MB each made a 42 MB index)
HEADLINE_CHARS = 2000
REASON_CHARS = 600  # one suspect reason, one error
ITEMS_SHOWN = 20  # suspect reasons, roles left changed


@dataclass(frozen=True)
class RunEntry:
    directory: str
    name: str
    run_id: str
    started: str
    status: str
    completed: int
    planned: int | None  # None for a hunt (RunManifest.planned_total)
    failed: int
    headline: str
    has_report: bool
    error: str = ""
    suspect: tuple[str, ...] = ()  # why the data is suspect, shown beside the result
    group: str = ""  # same matrix + inventory (render.group_key)
    testbed: str = ""
    series: tuple[SeriesPoint, ...] = ()
    page: str = "index.html"  # the run's report page (a hunt's is hunt.html: the culprits, not the cells)
    not_restored: tuple[str, ...] = ()  # hosts the run left changed (its status.json), shown first
    restore_with: str = ""  # the command that puts them back


def write_index(reports_dir: Path, rebuild: Rebuild) -> Path:
    """Write reports_dir/index.html: every run newest first (running ones too), then the trends
    and the nightly regression check of each matrix + inventory."""
    page = index_page(reports_dir, rebuild)
    return write_text_atomic(ReportsDir(reports_dir).index_html, page, what="cannot write the report")


def index_page(reports_dir: Path, rebuild: Rebuild) -> str:
    """The index as HTML (`orch serve` renders it live; write_index stores it)."""
    entries = run_entries(reports_dir, rebuild)
    groups = _groups(entries)  # of every run: a trend reaches back past the rows listed
    shown = entries[:INDEX_ROWS]
    return (
        environment()
        .get_template("index.html.j2")
        .render(
            runs=shown,
            total=len(entries),
            changed=[e for e in entries if e.not_restored],  # however old: its testbed is still changed
            groups=groups,
            flagged={g.checked_run: g.flagged for g in groups if g.flagged},
            change_text=change_text,
            matrices=sorted({e.name for e in shown}),
            testbeds=sorted({e.testbed for e in shown if e.testbed}),
            statuses=sorted({e.status for e in shown}),
            csp=csp(INDEX_SCRIPT),
            script=Markup(INDEX_SCRIPT),
        )
    )


def run_entries(reports_dir: Path, rebuild: Rebuild) -> list[RunEntry]:
    runs = (_bounded(_entry(d, rebuild)) for d in _run_dirs(reports_dir))
    return sorted(runs, key=lambda e: (e.started, e.directory), reverse=True)


def _groups(entries: Sequence[RunEntry]) -> list[GroupTrend]:
    """Matrix + inventory groups with at least two runs (a trend needs two points), by newest run."""
    by_key: dict[str, list[RunEntry]] = {}
    for e in entries:
        if e.group:
            by_key.setdefault(e.group, []).append(e)
    return [
        group_trends(key, runs[0].name, runs[0].testbed, [_night(r) for r in runs])
        for key, runs in by_key.items()
        if len(runs) >= 2
    ]


def _night(e: RunEntry) -> NightRun:
    return NightRun(e.run_id or e.directory, e.directory, e.started, e.status, e.series)


def regression_changes(run_dir: Path, rebuild: Rebuild) -> list[Change]:
    """The nightly regression check of one run against the earlier runs of its matrix + inventory
    in the same reports folder (for the webhook summary and `orch compare`). Only a finished run is
    a night, as in the index's check (trends.USABLE): an interrupted or stale run's partial rates
    were posted as `CHANGED vs earlier runs` that the index never flagged."""
    entries = run_entries(run_dir.parent, rebuild)
    me = next((e for e in entries if e.directory == run_dir.name), None)
    if me is None or not me.group or me.status not in USABLE:
        return []
    earlier = [_night(e) for e in entries if e.group == me.group and e.started < me.started]
    return regression_check(_night(me), earlier)


def _run_dirs(reports_dir: Path) -> list[Path]:
    if not reports_dir.is_dir():
        return []
    return [d for d in reports_dir.iterdir() if d.is_dir() and RunDir(d).is_run()]


def _entry(run_dir: Path, rebuild: Rebuild) -> RunEntry:
    run = RunDir(run_dir)
    try:
        manifest = load_manifest(run_dir)
    except OrchError as exc:
        return RunEntry(
            run_dir.name,
            run_dir.name,
            "",
            "",
            "unreadable",
            0,
            0,
            0,
            "",
            run.index_html.is_file(),
            error=str(exc),
        )
    live = run_state(run_dir, manifest.status)  # `stale`: its controller is gone (store.liveness)
    left = read_status(run_dir)  # the hosts its restore left changed, if any
    entry = RunEntry(
        directory=run_dir.name,
        name=manifest.name,
        run_id=manifest.run_id,
        started=manifest.started,
        status=live,
        completed=0,
        planned=manifest.planned_total,
        failed=0,
        headline="",
        has_report=run.index_html.is_file() or run.hunt_html.is_file(),
        page=HUNT_HTML if run.hunt_html.is_file() else "index.html",
        not_restored=left.not_restored if left else (),
        restore_with=recorded_restore(left.restore_with, run_dir) if left and left.not_restored else "",
    )
    try:
        summary = _cached_summary(run_dir, live) or rebuild(run_dir, manifest)  # rebuilt from the journal
    except OrchError as exc:
        return replace(entry, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - one run's folder, not the index of all runs
        return replace(entry, error=_unexpected(exc))
    return replace(
        entry,
        status=live if live == STALE else summary.status or manifest.status,
        completed=summary.completed,
        planned=summary.planned,
        failed=summary.failed,
        headline=summary.headline,
        suspect=summary.suspect,
        group=summary.group,
        testbed=summary.testbed or manifest.testbed,
        series=tuple(summary.series),
    )


def _bounded(e: RunEntry) -> RunEntry:
    """The entry as the index and /api/runs show it: each text cut with an ellipsis, each list to
    its first items and a count of the rest (a name orch accepts is at most MAX_TITLE characters;
    one hand-edited into run.json may be MiBs). The restore command is never cut (bounded by
    recorded_restore), nor the folder name (the file system bounds it)."""
    return replace(
        e,
        name=clip(e.name, MAX_TITLE),
        run_id=clip(e.run_id, MAX_TITLE),
        started=clip(e.started, 64),
        status=clip(e.status, 40),
        testbed=clip(e.testbed, MAX_TITLE),
        headline=clip(e.headline, HEADLINE_CHARS),
        error=clip(e.error, REASON_CHARS),
        suspect=tuple(clip_list(e.suspect, ITEMS_SHOWN, REASON_CHARS)),
        not_restored=tuple(clip_list(e.not_restored, ITEMS_SHOWN, MAX_TITLE)),
    )


def _unexpected(exc: Exception) -> str:
    """The one line the index shows for a run whose summary failed in a way orch did not foresee:
    a damaged sibling once took `orch run` and `orch report` of every other run down with it."""
    text = " ".join(str(exc).split())[:300]
    return f"cannot summarise this run: {type(exc).__name__}: {text} (a bug in orch: please report it)"


def _cached_summary(run_dir: Path, live: str = "") -> RunSummary | None:
    """The run's summary.json (written with its report), if it is newer than run.json and the
    journal; None sends the caller to rebuild the summary from the journal. Trusted, but not
    blindly: it is read with the bounded reader (a regular file of at most SUMMARY_BYTES, a FIFO
    never blocks) and its series points are validated (report.series), so a hand-edited or
    hostile file is rebuilt from the journal instead of reaching the statistics. Nor when the run
    is `live` stale and the summary was written while it ran: its headline says running."""
    run = RunDir(run_dir)
    path = run.summary_json
    if not path.is_file():
        return None
    newest_input = max((p.stat().st_mtime for p in (run.run_json, run.journal) if p.exists()), default=0.0)
    if path.stat().st_mtime < newest_input or path.stat().st_size > SUMMARY_BYTES:
        return None
    try:
        summary = RunSummary.model_validate_json(read_bounded_bytes(path, SUMMARY_BYTES))
    except (OrchError, pydantic.ValidationError):
        return None
    return None if live == STALE and summary.status != STALE else summary
