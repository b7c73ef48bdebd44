"""Adaptive runs without processes: a small 2x2 adaptive matrix's plan, its trial records (k of
10 sessions, the `corruption` proportion), and driving sweep.adaptive.AdaptiveSource with them.
For the tests of adaptive stopping and of what the readers of an adaptive run make of it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.model import Matrix
from orchestrator.core.plan import make_plan
from orchestrator.core.records import MetricValue, TrialRecord
from orchestrator.core.steps import Plan, Step
from orchestrator.sweep.adaptive import AdaptiveSource

REPO = Path(__file__).resolve().parents[2]

MATRIX = """\
name: adaptive
factors:
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
  cuda_graph:
    levels:
      on: {decode: {SGLANG_EXTRA_ARGS: ""}}
      off: {decode: {SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}
replicates: 8
adaptive: {metric: corruption, effect: 0.10, baseline_runs: 2}
repro:
  command: "true"
  metrics:
    corruption: {kind: proportion, regex: '(?P<k>\\d+)/(?P<n>\\d+)'}
"""


def plan_of(tmp_path: Path, text: str = MATRIX) -> tuple[Matrix, Plan]:
    (tmp_path / "m.yaml").write_text(text)
    m = read_matrix(tmp_path / "m.yaml")
    tb = read_inventory(REPO / "inventory/local.yaml").testbed(None)
    return m, make_plan(m, tb, seed=1)


def record(step: Step, k: int, n: int = 10) -> TrialRecord:
    t = step.trial
    return TrialRecord(
        run_id="r",
        trial=t.index,
        round=t.round,
        cell=t.cell.id,
        levels=t.cell.as_dict(),
        is_baseline=t.is_baseline,
        testbed="tb",
        status="completed",
        started="x",
        ended="y",
        duration_s=1.0,
        metrics={"corruption": MetricValue(kind="proportion", k=k, n=n)},
    )


def drive(source: AdaptiveSource, rate_of: Callable[[Step], int]) -> list[Step]:
    """Every step the source hands out, each answered with rate_of(step) of 10 sessions."""
    ran = []
    while (step := source.next()) is not None:
        ran.append(step)
        source.record(record(step, rate_of(step)))
    return ran
