"""`orch export` (tidy table) and `orch compare` (two runs side by side)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.cli.main import main
from orchestrator.core.records import Failure, MetricValue, RunManifest, TrialRecord
from orchestrator.report.compare import compare
from orchestrator.store.journal import Journal, write_json_atomic

FACTORS = {"overlap": ["on", "off"]}


def manifest(run_id: str) -> RunManifest:
    return RunManifest(
        run_id=run_id,
        name="t",
        orch_version="0",
        matrix_path="m.yaml",
        matrix_text="",
        matrix_sha256="x",
        inventory_path="i.yaml",
        inventory_text="",
        inventory_sha256="y",
        testbed="tb",
        seed=1,
        order="randomized",
        replicates=2,
        factors=FACTORS,
        baseline={"overlap": "on"},
        metrics={"corruption": "proportion", "wall": "number"},
        plan=[],
        started="2026-11-30T00:00:00Z",
    )


def trial(run_id: str, i: int, level: str, k: int, n: int = 40, wall: float = 1.0, failed: bool = False) -> TrialRecord:
    return TrialRecord(
        run_id=run_id,
        trial=i,
        round=i // 2,
        cell=f"overlap={level}",
        levels={"overlap": level},
        is_baseline=level == "on",
        testbed="tb",
        status="failed" if failed else "completed",
        failure=Failure(kind="workload", error="WorkloadError", message="repro exited 3") if failed else None,
        started="2026-11-30T00:00:00Z",
        ended="2026-11-30T00:00:01Z",
        duration_s=1.0,
        metrics={}
        if failed
        else {
            "corruption": MetricValue(kind="proportion", k=k, n=n),
            "wall": MetricValue(kind="number", value=wall, unit="s"),
        },
    )


def write_run(root: Path, run_id: str, trials: list[TrialRecord]) -> Path:
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    write_json_atomic(run_dir / "run.json", manifest(run_id))
    with Journal(run_dir / "journal.jsonl") as j:
        for t in trials:
            j.append(t)
    return run_dir


def test_tidy_export_has_one_row_per_trial_and_metric(tmp_path, capsys):
    run = write_run(
        tmp_path, "a", [trial("a", 0, "on", 6), trial("a", 1, "off", 0), trial("a", 2, "on", 0, failed=True)]
    )
    assert main(["export", str(run), "--format", "csv"]) == 0
    frame = pd.read_csv(run / "a.csv")
    assert len(frame) == 5  # 2 completed trials x 2 metrics + 1 failed trial without metric
    row = frame[(frame.trial == 0) & (frame.metric == "corruption")].iloc[0]
    assert (row.k, row.n, row.value, row["factor.overlap"]) == (6, 40, 0.15, "on")
    failed = frame[frame.status == "failed"]
    assert len(failed) == 1 and pd.isna(failed.iloc[0].metric) and failed.iloc[0].failure == "repro exited 3"
    assert main(["export", str(run), "--format", "json", "-o", str(tmp_path / "a.json")]) == 0
    assert len(json.loads((tmp_path / "a.json").read_text())) == 5
    assert main(["export", str(run), "--format", "parquet"]) == 0
    pq = pd.read_parquet(run / "a.parquet")
    assert list(pq.columns) == list(frame.columns) and len(pq) == 5
    assert pq[(pq.trial == 0) & (pq.metric == "corruption")].iloc[0].k == 6


def test_compare_flags_a_real_change_and_not_noise():
    a = [trial("a", 0, "on", 6), trial("a", 1, "off", 0), trial("a", 2, "on", 7), trial("a", 3, "off", 1)]
    b = [trial("b", 0, "on", 0), trial("b", 1, "off", 1), trial("b", 2, "on", 1), trial("b", 3, "off", 0)]
    c = compare(manifest("a"), a, manifest("b"), b)
    rows = {(r.cell, r.metric): r for r in c.rows}
    on = rows[("overlap=on", "corruption")]
    assert (on.a.k, on.a.n, on.b.k, on.b.n) == (13, 80, 1, 80)
    assert on.significant and on.diff == pytest.approx(1 / 80 - 13 / 80)
    assert on.diff_low < on.diff < on.diff_high < 0
    assert not rows[("overlap=off", "corruption")].significant
    assert any("overlap=on" in line and "13/80" in line for line in c.summary)


def test_compare_reports_unmatched_cells_and_ignores_failures(tmp_path, capsys):
    ra = write_run(tmp_path, "a", [trial("a", 0, "on", 6), trial("a", 1, "off", 0)])
    rb = write_run(tmp_path, "b", [trial("b", 0, "on", 5), trial("b", 1, "off", 0, failed=True)])
    assert main(["compare", str(ra), str(rb)]) == 0
    page = (tmp_path / "compare-a-vs-b.html").read_text()
    assert "only in A" in page and "overlap=off" in page
    assert "No cell differs significantly" in page
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")


def test_export_of_a_missing_run_is_a_clean_error(tmp_path, capsys):
    assert main(["export", str(tmp_path / "nope")]) == 2
    assert "Traceback" not in capsys.readouterr().err


CLASHING = {"value": ["a", "b"], "metric": ["x", "y"], "status": ["s", "t"], "trial": ["1", "2"], "k": ["p", "q"]}


def clashing_run(root: Path) -> Path:
    """A run whose factors are named like the fixed columns, one failed trial with a token in its message."""
    run_dir = root / "clash"
    run_dir.mkdir(parents=True)
    m = manifest("clash").model_copy(update={"factors": CLASHING, "baseline": {f: v[0] for f, v in CLASHING.items()}})
    write_json_atomic(run_dir / "run.json", m)
    with Journal(run_dir / "journal.jsonl") as j:
        for i, pick in enumerate((0, 1)):
            levels = {f: v[pick] for f, v in CLASHING.items()}
            t = trial("clash", i, "on", 6 - 6 * pick).model_copy(update={"levels": levels})
            j.append(t)
        failed = trial("clash", 2, "on", 0, failed=True)
        failure = failed.failure.model_copy(update={"message": "HTTP 401 for Authorization: Bearer abcdefghijk"})
        j.append(failed.model_copy(update={"levels": {f: v[1] for f, v in CLASHING.items()}, "failure": failure}))
    return run_dir


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_factors_named_like_fixed_columns_keep_their_own_namespace(tmp_path, capsys, fmt):
    run = clashing_run(tmp_path)
    assert main(["export", str(run), "--format", fmt]) == 0, capsys.readouterr().err
    path = run / f"clash.{fmt}"
    if fmt == "csv":
        frame = pd.read_csv(path, dtype={f"factor.{f}": str for f in CLASHING})
    elif fmt == "json":
        frame = pd.DataFrame(json.loads(path.read_text()))
    else:
        frame = pd.read_parquet(path)
    assert len(frame.columns) == len(set(frame.columns))
    assert [c for c in frame.columns if c.startswith("factor.")] == [f"factor.{f}" for f in CLASHING]
    assert len(frame) == 5  # 2 completed trials x 2 metrics + the failed one
    row = frame[(frame.trial == 0) & (frame.metric == "corruption")].iloc[0]
    assert (row.value, row.status, row.k) == (0.15, "completed", 6)  # the fixed columns are the measurements
    assert [row[f"factor.{f}"] for f in CLASHING] == [v[0] for v in CLASHING.values()]
    second = frame[(frame.trial == 1) & (frame.metric == "wall")].iloc[0]
    assert (second.value, second["factor.value"], second["factor.status"], second["factor.k"]) == (1.0, "b", "t", "q")
    failed = frame[frame.status == "failed"].iloc[0]
    assert (
        failed.failure == "HTTP 401 for Authorization: Bearer ••••"
        and "abcdefghijk" not in path.read_bytes().decode("utf-8", "replace")
    )
