"""reports/index.html: one line per run (name, date, status, headline, link to its report), and
a visible warning on a run whose data is suspect (void or failed trials, drift, overdispersion).

Why read each run's summary.json: rebuilding every report to list it would cost seconds per big
run. render.py writes summary.json beside the run's index.html; it is used when it is newer than
the run's journal and manifest, and the summary is rebuilt (not rendered) when it is missing or
stale. A run that cannot be read is listed with the reason, never skipped and
never fatal: the index is where one goes to find out what happened.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pydantic

from orchestrator.core.records import RunManifest
from orchestrator.errors import OrchError
from orchestrator.report.build import build_report
from orchestrator.report.render import RunSummary, csp, environment, load_manifest, load_trials, run_summary
from orchestrator.store.atomic import write_text_atomic
from orchestrator.store.rundir import ReportsDir, RunDir

SUMMARY_BYTES = 64 * 1024  # a summary is a few hundred bytes; anything bigger is not one of ours


@dataclass(frozen=True)
class RunEntry:
    directory: str
    name: str
    run_id: str
    started: str
    status: str
    completed: int
    planned: int
    failed: int
    headline: str
    has_report: bool
    error: str = ""
    suspect: tuple[str, ...] = ()  # why the data is suspect, shown beside the result


def write_index(reports_dir: Path) -> Path:
    """Write reports_dir/index.html listing every run directory, newest first."""
    entries = sorted((_entry(d) for d in _run_dirs(reports_dir)), key=lambda e: (e.started, e.directory), reverse=True)
    page = environment().get_template("index.html.j2").render(runs=entries, csp=csp(), script="")
    return write_text_atomic(ReportsDir(reports_dir).index_html, page, what="cannot write the report")


def _run_dirs(reports_dir: Path) -> list[Path]:
    if not reports_dir.is_dir():
        return []
    return [d for d in reports_dir.iterdir() if d.is_dir() and RunDir(d).is_run()]


def _entry(run_dir: Path) -> RunEntry:
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
            RunDir(run_dir).index_html.is_file(),
            error=str(exc),
        )
    entry = RunEntry(
        directory=run_dir.name,
        name=manifest.name,
        run_id=manifest.run_id,
        started=manifest.started,
        status=manifest.status,
        completed=0,
        planned=len(manifest.plan),
        failed=0,
        headline="",
        has_report=RunDir(run_dir).index_html.is_file(),
    )
    try:
        summary = _cached_summary(run_dir) or _fresh_summary(run_dir, manifest)
    except OrchError as exc:
        return replace(entry, error=str(exc))
    return replace(
        entry,
        status=summary.status or manifest.status,
        completed=summary.completed,
        planned=summary.planned,
        failed=summary.failed,
        headline=summary.headline,
        suspect=summary.suspect,
    )


def _cached_summary(run_dir: Path) -> RunSummary | None:
    """The run's summary.json (written with its report), if it is newer than run.json and the
    journal; None sends the caller to rebuild the summary from the journal."""
    run = RunDir(run_dir)
    path = run.summary_json
    if not path.is_file():
        return None
    newest_input = max((p.stat().st_mtime for p in (run.run_json, run.journal) if p.exists()), default=0.0)
    if path.stat().st_mtime < newest_input or path.stat().st_size > SUMMARY_BYTES:
        return None
    try:
        return RunSummary.model_validate_json(path.read_bytes())
    except (OSError, pydantic.ValidationError):
        return None


def _fresh_summary(run_dir: Path, manifest: RunManifest) -> RunSummary:
    trials, torn = load_trials(run_dir)
    report = build_report(manifest, trials, torn_tail=torn, drilldown_cap=0)
    return run_summary(report)
