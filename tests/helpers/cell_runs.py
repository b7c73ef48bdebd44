"""Tiny runs built cell by cell, for report tests that need exact counts (not a test module).

Each cell is its levels and its completed trials: a (k, n) of the `corruption` proportion, or a
dict of metric values ((k, n) for a proportion, a float for a number)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.core.records import Failure, MetricValue, PlannedTrial, RunManifest, TrialRecord

Trial = tuple[int, int] | Mapping[str, tuple[int, int] | float]
Cell = tuple[dict[str, str], Sequence[Trial]]
STAMP = "2026-11-30T00:00:00Z"


def cell_run(
    factors: dict[str, list[str]],
    baseline: dict[str, str],
    cells: Sequence[Cell],
    metrics: dict[str, str] | None = None,
    adaptive: bool = False,
) -> tuple[RunManifest, list[TrialRecord]]:
    """A completed run whose trials are exactly `cells`' (round r is a cell's r-th trial)."""
    plan: list[PlannedTrial] = []
    records: list[TrialRecord] = []
    for levels, trials in cells:
        cid = ",".join(f"{f}={levels[f]}" for f in factors)
        for r, trial in enumerate(trials):
            planned = PlannedTrial(trial=len(plan), round=r, cell=cid, levels=levels, is_baseline=levels == baseline)
            plan.append(planned)
            records.append(planned_record(planned, trial))
    manifest = RunManifest(
        run_id="r1", name="t", orch_version="0", matrix_path="m.yaml", matrix_text="", matrix_sha256="x",
        inventory_path="i.yaml", inventory_text="", inventory_sha256="y", testbed="tb", seed=1,
        order="randomized", replicates=max(len(t) for _, t in cells), factors=factors, baseline=baseline,
        metrics=metrics or {"corruption": "proportion"}, plan=plan, started=STAMP,
        ended="2026-11-30T01:00:00Z", status="completed", adaptive=adaptive,
    )  # fmt: skip
    return manifest, records


def planned_record(planned: PlannedTrial, trial: Trial) -> TrialRecord:
    """The completed record of a planned trial with these metric values."""
    values = {"corruption": trial} if isinstance(trial, tuple) else trial
    return TrialRecord(
        run_id="r1", trial=planned.trial, round=planned.round, cell=planned.cell, levels=planned.levels,
        is_baseline=planned.is_baseline, testbed="tb", status="completed", started=STAMP,
        ended="2026-11-30T00:00:01Z", duration_s=1.0,
        metrics={name: _value(v) for name, v in values.items()},
    )  # fmt: skip


def _value(v: tuple[int, int] | float) -> MetricValue:
    if isinstance(v, tuple):
        return MetricValue(kind="proportion", k=v[0], n=v[1])
    return MetricValue(kind="number", value=v)


def failed_record(planned: PlannedTrial, *, attempt: int = 1, retried: bool = False) -> TrialRecord:
    """The planned trial's failed attempt: its repro crashed, so it has no metric at all (`retried`:
    the runner tried it again, so this attempt ended nothing)."""
    return TrialRecord(
        run_id="r1", trial=planned.trial, round=planned.round, cell=planned.cell, levels=planned.levels,
        is_baseline=planned.is_baseline, testbed="tb", attempt=attempt, status="failed", started=STAMP,
        ended="2026-11-30T00:00:01Z", duration_s=1.0, retried=retried,
        failure=Failure(kind="workload", error="WorkloadError", message="repro exited with code 1"),
    )  # fmt: skip
