"""reports/index.html: one line per run (name, date, status, headline, link to its report).

Why read each run's summary.json: rebuilding every report to list it would cost seconds per big
run. render.py writes summary.json beside the run's index.html; it is used when it is newer than
the run's journal and manifest, and the summary is rebuilt (not rendered) when it is missing or
stale. A run that cannot be read is listed with the reason, never skipped and
never fatal: the index is where one goes to find out what happened.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from orchestrator.core.records import RunManifest
from orchestrator.errors import OrchError
from orchestrator.report.build import build_report
from orchestrator.report.render import csp, environment, load_manifest, load_trials
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
    base = dict(
        directory=run_dir.name,
        name=manifest.name,
        run_id=manifest.run_id,
        started=manifest.started,
        has_report=RunDir(run_dir).index_html.is_file(),
    )
    try:
        summary = _cached_summary(run_dir) or _fresh_summary(run_dir, manifest)
    except OrchError as exc:
        return RunEntry(
            **base,
            status=manifest.status,
            completed=0,
            planned=len(manifest.plan),
            failed=0,
            headline="",
            error=str(exc),
        )
    return RunEntry(
        **base,
        status=str(summary.get("status", manifest.status)),
        completed=int(summary.get("completed", 0)),
        planned=int(summary.get("planned", len(manifest.plan))),
        failed=int(summary.get("failed", 0)),
        headline=str(summary.get("headline", "")),
    )


def _cached_summary(run_dir: Path) -> dict[str, object] | None:
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
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _fresh_summary(run_dir: Path, manifest: RunManifest) -> dict[str, object]:
    trials, torn = load_trials(run_dir)
    report = build_report(manifest, trials, torn_tail=torn, drilldown_cap=0)
    return {
        "headline": report.headline[0].text if report.headline else "",
        "completed": report.completed,
        "planned": report.planned,
        "failed": report.failed,
        "status": report.status,
    }
