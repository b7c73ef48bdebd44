"""Synthetic runs for the report tests and the report benchmark (not a test module).

Shaped like the DSV4 finding: corruption ~16% only when bf16 index-K, CUDA graph and multi-stream
overlap are all on, ~0-1% otherwise; an "anomalies" counter that moves with index-K (≈320 with
bf16, ≈997 with fp8) but not with corruption; a wall time. Seeded, so every test sees the same run.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from orchestrator.core.records import (
    EventRecord,
    Failure,
    MetricValue,
    PlannedTrial,
    ReproOutcome,
    RunManifest,
    TrialRecord,
)
from orchestrator.store.manifest import save_manifest

FACTORS = {"bf16_index_k": ["on", "off"], "cuda_graph": ["on", "off"], "overlap": ["on", "off"]}
ALL_ON = {"bf16_index_k": "on", "cuda_graph": "on", "overlap": "on"}
ALL_OFF = {"bf16_index_k": "off", "cuda_graph": "off", "overlap": "off"}
MATRIX_TEXT = """name: overlap_ablation
factors:
  bf16_index_k: {env: {prefill: SGLANG_DSV4_BF16_INDEX_K, decode: SGLANG_DSV4_BF16_INDEX_K}, levels: [on, off]}
  cuda_graph:
    levels: {on: {decode: {SGLANG_EXTRA_ARGS: ""}}, off: {decode: {SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}}
  overlap: {env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}, levels: [on, off]}
baseline: {bf16_index_k: on, cuda_graph: on, overlap: on}
"""
INVENTORY_TEXT = """testbeds:
  local:
    prefill: {host: 127.0.0.1, unit: sglang-dsv4-prefill}
    decode: {host: 127.0.0.1, unit: sglang-dsv4-decode, env: {HF_TOKEN: hf_supersecret123}}
"""
T0 = datetime(2026, 5, 9, 7, 0, 0, tzinfo=timezone.utc)


def corruption_rate(levels: dict[str, str]) -> float:
    if all(levels[f] == "on" for f in FACTORS):
        return 0.16
    return 0.005 if levels["bf16_index_k"] == "on" else 0.0


def cell_id(levels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in levels.items())


def synthetic_run(
    *,
    replicates: int = 2,
    sessions: int = 40,
    seed: int = 1,
    baseline: dict[str, str] | None = None,
    rate: Callable[[dict[str, str]], float] = corruption_rate,
    failures: bool = True,
    stdout: str | None = None,
    secret: bool = True,
    status: str = "completed",
    run_id: str = "20260509-070000-overlap_ablation",
    units: dict[str, str] | None = None,
) -> tuple[RunManifest, list[TrialRecord]]:
    """A finished run: manifest + records (randomized rounds, some failures with retries). Without
    `units` its run.json is written as before metric units were recorded (none in the manifest)."""
    rng = np.random.default_rng(seed)
    base = dict(baseline or ALL_ON)
    cells = [dict(zip(FACTORS, combo, strict=True)) for combo in itertools.product(*FACTORS.values())]
    plan: list[PlannedTrial] = []
    for rnd in range(replicates):
        for idx in rng.permutation(len(cells)):
            levels = cells[int(idx)]
            plan.append(
                PlannedTrial(
                    trial=len(plan), round=rnd, cell=cell_id(levels), levels=levels, is_baseline=levels == base
                )
            )
    records: list[TrialRecord] = []
    for planned in plan:
        if failures and planned.trial in (3, 9):
            records.append(_failed(run_id, planned, infra=planned.trial == 3))
        records.append(_completed(run_id, planned, rng, sessions, rate, stdout, secret))
    manifest = RunManifest(
        run_id=run_id,
        name="overlap_ablation",
        description="Which flag corrupts tool calls?",
        orch_version="0.1.0",
        matrix_path="matrices/overlap_ablation.yaml",
        matrix_text=MATRIX_TEXT,
        matrix_sha256=hashlib.sha256(MATRIX_TEXT.encode()).hexdigest(),
        inventory_path="inventories/local.yaml",
        inventory_text=INVENTORY_TEXT,
        inventory_sha256=hashlib.sha256(INVENTORY_TEXT.encode()).hexdigest(),
        testbed="local",
        seed=seed,
        order="randomized",
        replicates=replicates,
        factors=FACTORS,
        baseline=base,
        metrics={"corruption": "proportion", "wall": "number", "anomalies": "number"},
        metric_units=units or {},
        plan=plan,
        hosts={"prefill": {"host": "127.0.0.1"}, "decode": {"host": "127.0.0.1"}},
        started=_iso(0),
        ended=_iso(len(plan) * 10 + 5),
        status=status,
    )
    return manifest, records


def _completed(
    run_id: str,
    planned: PlannedTrial,
    rng: np.random.Generator,
    sessions: int,
    rate: Callable[[dict[str, str]], float],
    stdout: str | None,
    secret: bool,
) -> TrialRecord:
    levels = planned.levels
    k = int(rng.binomial(sessions, rate(levels)))
    anomalies = float(rng.poisson(320 if levels["bf16_index_k"] == "on" else 997))
    wall = float(round(rng.normal(160, 5), 1))
    tail = (
        stdout
        if stdout is not None
        else (
            f'wall={wall}s counts={{"done": {sessions - k}, "no_tool": {k}}}\n'
            f"CORRUPTION sessions: {k}/{sessions} = {round(100 * k / sessions)}%\n"
        )
    )
    trial_dir = f"trials/{planned.trial:04d}"
    env = {
        "prefill": {"SGLANG_DSV4_BF16_INDEX_K": "1" if levels["bf16_index_k"] == "on" else "0"},
        "decode": {
            "SGLANG_DSV4_BF16_INDEX_K": "1" if levels["bf16_index_k"] == "on" else "0",
            "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP": "1" if levels["overlap"] == "on" else "0",
            "SGLANG_EXTRA_ARGS": "" if levels["cuda_graph"] == "on" else "--disable-cuda-graph",
        },
    }
    if secret:
        env["decode"]["HF_TOKEN"] = "hf_supersecret123"
    return TrialRecord(
        run_id=run_id,
        trial=planned.trial,
        round=planned.round,
        cell=planned.cell,
        levels=levels,
        is_baseline=planned.is_baseline,
        testbed="local",
        attempt=2 if planned.trial in (3, 9) else 1,
        status="completed",
        started=_iso(planned.trial * 10),
        ended=_iso(planned.trial * 10 + 9),
        duration_s=9.0,
        env=env,
        restarted=["prefill:sglang-dsv4-prefill", "decode:sglang-dsv4-decode"],
        health_wait_s={"prefill": 1.2, "decode": 1.4, "router": 0.1},
        repro=ReproOutcome(
            command="python repro_agent.py --sessions 40",
            exit_code=0,
            duration_s=wall,
            stdout_tail=tail,
            stdout_path=f"{trial_dir}/repro.out",
            stderr_path=f"{trial_dir}/repro.err",
        ),
        metrics={
            "corruption": MetricValue(kind="proportion", k=k, n=sessions),
            "wall": MetricValue(kind="number", value=wall, unit="s"),
            "anomalies": MetricValue(kind="number", value=anomalies),
        },
        logs={"decode:sglang-dsv4-decode": f"{trial_dir}/logs/decode-sglang-dsv4-decode.log"},
    )


def _failed(run_id: str, planned: PlannedTrial, *, infra: bool) -> TrialRecord:
    failure = (
        Failure(
            kind="infrastructure",
            error="HealthTimeout",
            message="decode: http://127.0.0.1:30002/health not ready after 900 s (see log)",
            detail="Capturing CUDA graphs... OOM",
        )
        if infra
        else Failure(
            kind="workload",
            error="WorkloadError",
            message="repro exited with code 1",
            detail="Traceback: ConnectionResetError",
        )
    )
    return TrialRecord(
        run_id=run_id,
        trial=planned.trial,
        round=planned.round,
        cell=planned.cell,
        levels=planned.levels,
        is_baseline=planned.is_baseline,
        testbed="local",
        attempt=1,
        status="failed",
        failure=failure,
        started=_iso(planned.trial * 10),
        ended=_iso(planned.trial * 10 + 3),
        duration_s=3.0,
        logs={"decode:sglang-dsv4-decode": f"trials/{planned.trial:04d}/logs/decode.log"},
    )


def trial_counts(records: list[TrialRecord], metric: str = "corruption") -> dict[str, list[tuple[int, int]]]:
    """Each cell's trials as (k, n) of a proportion metric, in record order (what the report's
    dispersion is estimated from)."""
    trials: dict[str, list[tuple[int, int]]] = {}
    for r in records:
        m = r.metrics[metric]
        trials.setdefault(r.cell, []).append((m.k or 0, m.n or 0))
    return trials


def write_run(
    run_dir: Path,
    manifest: RunManifest,
    records: list[TrialRecord],
    end_events: tuple[str, ...] = ("run_finished",),
    *,
    plan_json: bool = False,
) -> Path:
    """run.json + journal.jsonl (with start and `end_events`) in run_dir. The planned trials are
    inline in run.json (as orch wrote runs before plan.json), or with `plan_json` in plan.json, as
    orch writes them now (store.manifest.save_manifest)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if plan_json:
        save_manifest(run_dir, manifest)
    else:
        (run_dir / "run.json").write_text(manifest.model_dump_json(indent=2))
    start = EventRecord(run_id=manifest.run_id, event="run_started", at=manifest.started)
    ends = [EventRecord(run_id=manifest.run_id, event=e, at=manifest.ended or "") for e in end_events]
    lines = [start.model_dump_json()] + [r.model_dump_json() for r in records] + [e.model_dump_json() for e in ends]
    (run_dir / "journal.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def _iso(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def fewer_factors(
    manifest: RunManifest, records: list[TrialRecord], keep: tuple[str, ...], *, metrics: tuple[str, ...] = ()
) -> tuple[RunManifest, list[TrialRecord]]:
    """The run cut down to the factors in `keep` (the trials where every other factor is at its
    baseline level) and, with `metrics`, to those metrics: a 1- or 2-factor run, or a
    proportion-only one, for the tests of which sentences a page shows for which design."""
    base = manifest.baseline
    kept_metrics = metrics or tuple(manifest.metrics)

    def at_base(levels: dict[str, str]) -> bool:
        return all(v == base[f] for f, v in levels.items() if f not in keep)

    def cut(levels: dict[str, str]) -> dict[str, str]:
        return {f: v for f, v in levels.items() if f in keep}

    plan = [
        p.model_copy(update={"levels": cut(p.levels), "cell": cell_id(cut(p.levels))})
        for p in manifest.plan
        if at_base(p.levels)
    ]
    renumber = {p.trial: i for i, p in enumerate(plan)}
    plan = [p.model_copy(update={"trial": renumber[p.trial]}) for p in plan]
    cut_records = [
        r.model_copy(
            update={
                "levels": cut(r.levels),
                "cell": cell_id(cut(r.levels)),
                "trial": renumber[r.trial],
                "metrics": {m: v for m, v in r.metrics.items() if m in kept_metrics},
            }
        )
        for r in records
        if at_base(r.levels)
    ]
    cut_manifest = manifest.model_copy(
        update={
            "factors": {f: v for f, v in manifest.factors.items() if f in keep},
            "baseline": cut(base),
            "metrics": {m: k for m, k in manifest.metrics.items() if m in kept_metrics},
            "plan": plan,
        }
    )
    return cut_manifest, cut_records


# factor names long enough that a cell's "k=v,..." (one word of ~100 characters) is wider than a
# phone and than a chart's row label
LONG_NAMES = {
    "bf16_index_k": "bf16_index_k_on_prefill_and_decode",
    "cuda_graph": "cuda_graph_capture_on_decode",
    "overlap": "multi_stream_overlap_on_decode",
}


def renamed_factors(
    manifest: RunManifest, records: list[TrialRecord], names: dict[str, str]
) -> tuple[RunManifest, list[TrialRecord]]:
    """The run with its factors renamed (old name -> new), levels and cells alike."""

    def named(levels: dict[str, str]) -> dict[str, str]:
        return {names.get(k, k): v for k, v in levels.items()}

    plan = [p.model_copy(update={"levels": named(p.levels), "cell": cell_id(named(p.levels))}) for p in manifest.plan]
    records = [r.model_copy(update={"levels": named(r.levels), "cell": cell_id(named(r.levels))}) for r in records]
    factors = {names.get(k, k): v for k, v in manifest.factors.items()}
    update = {"factors": factors, "baseline": named(manifest.baseline), "plan": plan}
    return manifest.model_copy(update=update), records
