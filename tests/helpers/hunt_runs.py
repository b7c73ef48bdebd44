"""Hunt runs on disk without processes: a hunt matrix's run folder (run.json, plan.json) and a
journal whose trials the hunt's own step source (sweep.hunt.HuntSource) handed out, answered by
a seeded oracle instead of a testbed. For the tests of what the readers of a hunt run (the rule
of store.runtrials, the report, the runs index, notify) make of it."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.huntplan import hunt_plan
from orchestrator.core.model import Matrix
from orchestrator.core.records import EventRecord, Failure, MetricValue, TrialRecord
from orchestrator.core.steps import Step
from orchestrator.store.journal import Journal
from orchestrator.store.manifest import load_manifest, save_manifest
from orchestrator.store.planrecord import make_manifest
from orchestrator.store.rundir import RunDir
from orchestrator.sweep.hunt import HuntSource

REPO = Path(__file__).resolve().parents[2]
STAMP = "2026-12-05T00:00:00.000Z"
TRUTH = ("bf16_index_k", "cuda_graph", "overlap")
# The auditor's small hunt: 4 suspects, the DSV4 AND among them, torch_compile a decoy
SMALL_HUNT = """name: small_hunt
factors:
  bf16_index_k:
    env: {prefill: SGLANG_DSV4_BF16_INDEX_K, decode: SGLANG_DSV4_BF16_INDEX_K}
    levels: [on, off]
  cuda_graph:
    levels:
      on:  {decode: {SGLANG_EXTRA_ARGS: ""}}
      off: {decode: {SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
  torch_compile:
    env: {decode: SGLANG_ENABLE_TORCH_COMPILE}
    levels: [on, off]
hunt:
  metric: corruption
  sessions_per_trial: 20
  max_sessions: 600
seed: 3
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 20 --seed {trial_seed}"
  timeout: 300
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""

# (step, how many times its configuration was handed out before) -> (status, k) of that trial
Answer = Callable[[Step, int], tuple[str, int]]


def small_hunt(folder: Path) -> Matrix:
    path = folder / "small_hunt.yaml"
    path.write_text(SMALL_HUNT)
    return read_matrix(path)


def truth_answer(matrix: Matrix, seed: int = 1, fail: Callable[[Step, int], bool] = lambda s, i: False) -> Answer:
    """The DSV4 AND at 16% of 20 sessions, background 0.5%; `fail(step, i)`: that trial fails
    (its repro crashed) instead."""
    rng = random.Random(seed)
    spec = matrix.hunt
    assert spec is not None

    def answer(step: Step, handed: int) -> tuple[str, int]:
        if fail(step, handed):
            return "failed", 0
        levels = dict(step.trial.cell.levels)
        rate = 0.16 if all(levels[f] == spec.failing[f] for f in TRUTH) else 0.005
        return "completed", sum(rng.random() < rate for _ in range(20))

    return answer


def hunt_run(
    run_dir: Path, matrix: Matrix, answer: Answer, *, limit: int = 200, status: str = "completed"
) -> list[TrialRecord]:
    """A hunt's run folder as `orch hunt` leaves it: the trials its step source hands out (one
    testbed), journaled in that order, until the hunt stops or `limit` trials; run.json's status
    `status`. Returns the trial records."""
    inventory = read_inventory(REPO / "inventory" / "local.yaml")
    plan = hunt_plan(matrix, inventory.testbed(None), 1)
    run_dir.mkdir(parents=True)
    manifest = make_manifest(plan, inventory, run_dir.name, STAMP)
    save_manifest(run_dir, manifest)
    journal = Journal(RunDir(run_dir).journal)
    journal.append(EventRecord(run_id=manifest.run_id, event="run_started", at=STAMP))
    records = run_source(HuntSource(matrix), journal, manifest.run_id, answer, {}, limit)
    journal.append(EventRecord(run_id=manifest.run_id, event="run_finished", at=STAMP))
    journal.close()
    save_manifest(run_dir, load_manifest(run_dir).model_copy(update={"status": status, "ended": STAMP}))
    return records


def run_source(
    source: HuntSource, journal: Journal, run_id: str, answer: Answer, handed: dict[str, int], limit: int
) -> list[TrialRecord]:
    """The trials `source` hands out, answered and journaled in that order, until the hunt stops or
    `limit` trials; `handed` counts the hand-outs of each cell (kept across a resume)."""
    records: list[TrialRecord] = []
    while len(records) < limit and (step := source.next()) is not None:
        cell = step.trial.cell
        state, k = answer(step, handed.get(cell.id, 0))
        handed[cell.id] = handed.get(cell.id, 0) + 1
        record = _record(run_id, step, state, k)
        journal.append(record)
        source.record(record)
        records.append(record)
    return records


def _record(run_id: str, step: Step, status: str, k: int) -> TrialRecord:
    levels, k_or_none = dict(step.trial.cell.levels), None if status == "failed" else k
    record = hunt_trial(levels, step.trial.index, k_or_none, run_id=run_id, round_=step.trial.round)
    return record.model_copy(update={"is_baseline": step.trial.is_baseline})


def hunt_trial(levels: dict[str, str], index: int, k: int | None, *, run_id: str = "h", round_: int = 0) -> TrialRecord:
    """A trial of a hunt configuration: k of 20 sessions failed, or (k None) its repro crashed."""
    crashed = Failure(kind="workload", error="WorkloadError", message="repro exited with code 3")
    return TrialRecord(
        run_id=run_id,
        trial=index,
        round=round_,
        cell=",".join(f"{f}={v}" for f, v in levels.items()),
        levels=levels,
        testbed="local-sim",
        status="failed" if k is None else "completed",
        failure=crashed if k is None else None,
        started=STAMP,
        ended=STAMP,
        duration_s=1.0,
        metrics={} if k is None else {"corruption": MetricValue(kind="proportion", k=k, n=20)},
    )
