"""A cell an adaptive rule stopped early shows one interval everywhere: its report's anytime-valid
one (clustered.cell_rate, report.build.stopped_cells), in `orch compare` and in the runs index's
trends (summary.json's series), marked "stopped early"; before, both recomputed the narrower
fixed-sample interval. Unit tier: run folders written from a driven AdaptiveSource, no servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.adaptive_runs import REPO, drive, plan_of, record
from helpers.report_synth import write_run

from orchestrator.core import clustered
from orchestrator.core.config import read_inventory
from orchestrator.core.records import RunManifest, TrialRecord
from orchestrator.report.build import build_report
from orchestrator.report.compare import compare, write_comparison_page
from orchestrator.report.render import fresh_summary, write_report
from orchestrator.report.site import index_page
from orchestrator.store.planrecord import make_manifest
from orchestrator.sweep.adaptive import AdaptiveSource

STOPPED = {"overlap=off,cuda_graph=off", "overlap=off,cuda_graph=on"}  # clean against a 20% baseline
MARK = "(stopped early: anytime-valid interval)"


def adaptive_run(tmp_path: Path, run_id: str, started: str) -> tuple[RunManifest, list[TrialRecord]]:
    """The run test_adaptive's report test makes: overlap=off cells stopped early at 0/30."""
    m, plan = plan_of(tmp_path)
    ran = drive(AdaptiveSource(plan.steps, set(), m), lambda s: 0 if "overlap=off" in s.trial.cell.id else 2)
    records = [
        record(s, 0 if "overlap=off" in s.trial.cell.id else 2).model_copy(update={"run_id": run_id}) for s in ran
    ]
    inventory = read_inventory(REPO / "inventory/local.yaml")
    manifest = make_manifest(plan, inventory, run_id, started)
    return manifest.model_copy(update={"status": "completed", "ended": started}), records


def trial_counts(run: tuple[RunManifest, list[TrialRecord]], cell: str) -> list[tuple[int, int]]:
    return [(t.metrics["corruption"].k or 0, t.metrics["corruption"].n or 0) for t in run[1] if t.cell == cell]


def test_compare_gives_a_stopped_cell_its_reports_anytime_interval_and_says_so(tmp_path):
    a = adaptive_run(tmp_path, "20260601-070000-a", "2026-06-01T07:00:00Z")
    b = adaptive_run(tmp_path, "20260602-070000-b", "2026-06-02T07:00:00Z")
    c = compare(*a, *b)
    rows = [r for r in c.rows if r.metric == "corruption"]
    cells = {t.cell for t in a[1]}
    disp = clustered.dispersion([trial_counts(run, cell) for run in (a, b) for cell in cells])  # both runs'
    for r in rows:
        for side, run in ((r.a, a), (r.b, b)):
            trials = len(trial_counts(run, r.cell))
            assert side.rate is not None and side.k is not None and side.n is not None
            fixed = clustered.widened_rate(side.k, side.n, disp, trials)
            expected = clustered.stopped_rate(side.k, side.n, disp, trials) if r.cell in STOPPED else fixed
            assert (side.rate.low, side.rate.high) == pytest.approx((expected.low, expected.high), rel=1e-12)
            if r.cell in STOPPED:  # 0/30: the fixed-sample bound compare used to show is tighter
                assert side.rate.high > fixed.high
    assert {r.cell for r in rows if r.a.stopped and r.b.stopped} == STOPPED
    assert not any(r.a.stopped or r.b.stopped for r in rows if r.cell not in STOPPED)
    ra, rb = write_run(tmp_path / "a", *a), write_run(tmp_path / "b", *b)
    page = write_comparison_page(ra, rb).path.read_text()  # from the run folders: the plan on disk
    assert page.count(MARK) == 2 * len(STOPPED)  # both sides of each stopped cell's row
    fixed_a = (a[0].model_copy(update={"adaptive": False}), a[1])  # not an adaptive run: nothing marked
    assert not any(r.a.stopped or r.b.stopped for r in compare(*fixed_a, *fixed_a).rows)


def test_the_runs_index_trend_shows_a_stopped_cells_report_interval(tmp_path):
    reports = tmp_path / "reports"
    runs = [("20260601-070000-a", "2026-06-01T07:00:00Z"), ("20260602-070000-b", "2026-06-02T07:00:00Z")]
    for run_id, started in runs:
        write_report(write_run(reports / run_id, *adaptive_run(tmp_path, run_id, started)))
    newest = reports / runs[-1][0]
    report = build_report(*adaptive_run(tmp_path, *runs[-1]))
    page = index_page(reports, fresh_summary)
    for cell in report.cells:
        rate = cell.proportions["corruption"].rate
        words = f"{rate.rate:.1%} [{rate.low:.1%}, {rate.high:.1%}]"  # the newest run's report's interval
        assert f'<td class="num">{words}' in page, cell.cell
        mark = f" {MARK}" if cell.cell in STOPPED else ""
        assert f'<td class="num">{words}{mark}</td>' in page, cell.cell
    series = json.loads((newest / "summary.json").read_text())["series"]
    assert {p["cell"] for p in series if p.get("stopped")} == STOPPED
