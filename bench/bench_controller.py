"""Benchmark: the controller at scale - planning 4,096 cells, resuming from a 100,000-trial journal.

    /root/venv-orch/bin/python bench/bench_controller.py [--levels 8] [--trials 100000]

1. plan: a synthetic matrix of 4 factors x 8 levels (4,096 cells, orch's limit: core.model.MAX_CELLS;
   each factor sets one variable on decode or prefill) read with read_matrix from a generated YAML
   file, then make_plan, for each order (randomized, sequential, min-restarts). Target: <= 1 s.
2. journal: a synthetic run of 100,000 realistic trial records (3 two-level factors, 12,500
   replicate rounds), written once; then read_journal, and the whole resume preparation
   (what `orch resume` does before it connects: load run.json, read the matrix and inventory,
   rebuild the plan and check its digest against run.json's, repair a torn tail, collect the
   done trials). Target: <= 1 s.

Each measurement runs in a fresh Python process, so its peak RSS is its own (printed beside it).
A measurement that takes longer than --limit seconds is stopped and reported as such. Figures
are printed, never asserted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ORDERS = ("randomized", "sequential", "min-restarts")
ROLES = ("prefill", "decode", "router")


# ----------------------------------------------------------------------------- inputs (pure text)
def inventory_yaml() -> str:
    """A local 3-role inventory: planning reads only its shape, nothing is started."""
    hosts = []
    for i, role in enumerate(ROLES):
        after = "\n        after: [prefill, decode]" if role == "router" else ""
        hosts.append(f"""      {role}:
        transport: local
        env_file: {role}.env
        units:
          - name: bench-{role}
            command: ["{{python}}", -m, orchestrator.sim.server, --role, {role}, --port, "{31000 + i}"]
        url: http://127.0.0.1:{31000 + i}{after}""")
    return "testbeds:\n  bench:\n    hosts:\n" + "\n".join(hosts) + "\n"


def plan_matrix_yaml(factors: int, levels: int, order: str) -> str:
    """`factors` factors of `levels` levels, alternating decode / prefill variables."""
    lines = ["name: bench-plan", "factors:"]
    for f in range(factors):
        role = "decode" if f % 2 == 0 else "prefill"
        values = ", ".join(f'"{v}"' for v in range(levels))
        lines += [f"  f{f}:", f"    env: {{{role}: BENCH_F{f}}}", f"    levels: [{values}]"]
    lines += [
        f"order: {order}",
        "seed: 1",
        "repro:",
        '  command: "true"',
        "  metrics: {wall: {regex: 'wall=(?P<value>[0-9.]+)s'}}",
    ]
    return "\n".join(lines) + "\n"


def resume_matrix_yaml(replicates: int) -> str:
    return f"""name: bench-resume
factors:
  bf16_index_k: {{env: {{prefill: SGLANG_DSV4_BF16_INDEX_K, decode: SGLANG_DSV4_BF16_INDEX_K}}, levels: [on, off]}}
  cuda_graph:
    levels:
      on: {{decode: {{SGLANG_EXTRA_ARGS: ""}}}}
      off: {{decode: {{SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}}}
  overlap: {{env: {{decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}}, levels: [on, off]}}
replicates: {replicates}
order: randomized
seed: 7
repro:
  command: "{{python}} -m orchestrator.sim.repro --router {{router_url}} --sessions 40 --seed {{trial_seed}}"
  metrics:
    corruption: {{kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}}
    wall: {{regex: 'wall=(?P<value>[0-9.]+)s', unit: s}}
collect:
  anomalies: {{role: decode, pattern: ANOMALY}}
"""


# ----------------------------------------------------------------------------- phases (child process)
def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def phase_plan(work: Path, order: str, factors: int, levels: int) -> dict[str, object]:
    from orchestrator.core.config import read_inventory, read_matrix
    from orchestrator.core.plan import make_plan

    matrix_path = work / f"plan-{order}-{factors}x{levels}.yaml"
    matrix_path.write_text(plan_matrix_yaml(factors, levels, order))
    t0 = time.perf_counter()
    matrix = read_matrix(matrix_path)
    testbed = read_inventory(work / "inventory.yaml").testbed("bench")
    t1 = time.perf_counter()
    plan = make_plan(matrix, testbed)
    t2 = time.perf_counter()
    return {
        "cells": len(plan.cells),
        "trials": len(plan.steps),
        "restarts": plan.restart_count,
        "read_s": t1 - t0,
        "plan_s": t2 - t1,
    }


def phase_read_journal(work: Path) -> dict[str, object]:
    from orchestrator.core.records import TrialRecord
    from orchestrator.store.journal import read_journal

    t0 = time.perf_counter()
    contents = read_journal(work / "run" / "journal.jsonl")
    trials = sum(isinstance(r, TrialRecord) for r in contents.records)
    return {"trials": trials, "seconds": time.perf_counter() - t0}


def phase_resume(work: Path, reader: str) -> dict[str, object]:
    """The steps of sweep.api.resume before it connects to any host, with public functions.
    reader "read_journal": the done set from full records; "trial_statuses": from
    journal.trial_statuses (what sweep.api.resume does), which answers from the status index;
    "trial_statuses-no-index": the same with the index moved away, so it reads every line head
    (a journal written before the index, or after a kill between a line and its index entry)."""
    from orchestrator.core.config import read_inventory, read_matrix
    from orchestrator.core.plan import make_plan
    from orchestrator.core.records import TrialRecord
    from orchestrator.store import journal
    from orchestrator.store.manifest import load_manifest
    from orchestrator.store.planrecord import check_same_plan

    run_dir = work / "run"
    path = run_dir / "journal.jsonl"
    marks = [("start", time.perf_counter())]
    manifest = load_manifest(run_dir, plan=False)  # as api.resume: the digest, not the stored trials
    marks.append(("load run.json", time.perf_counter()))
    matrix = read_matrix(Path(manifest.matrix_path))
    inventory = read_inventory(Path(manifest.inventory_path))
    if (matrix.sha256, inventory.sha256) != (manifest.matrix_sha256, manifest.inventory_sha256):
        raise SystemExit("the synthetic run's matrix or inventory changed")
    marks.append(("read matrix + inventory", time.perf_counter()))
    plan = make_plan(matrix, inventory.testbed(manifest.testbeds[0]), manifest.seed, manifest.replicates)
    marks.append(("rebuild the plan (make_plan)", time.perf_counter()))
    check_same_plan(run_dir, manifest, plan)
    marks.append(("compare its digest with run.json's", time.perf_counter()))
    journal.repair_torn_tail(path)
    marks.append(("repair_torn_tail", time.perf_counter()))
    index, aside = journal.index_path(path), path.with_name("index.aside")
    if reader == "trial_statuses-no-index":
        index.rename(aside)
        try:
            done = set(journal.trial_statuses(path).finished)
        finally:
            aside.rename(index)
    elif reader == "trial_statuses":
        done = set(journal.trial_statuses(path).finished)  # type: ignore[attr-defined]
    else:
        done = {
            r.trial
            for r in journal.read_journal(path).records
            if isinstance(r, TrialRecord) and r.status in ("completed", "failed")
        }
    marks.append((f"done set ({reader})", time.perf_counter()))
    steps = {name: b - a for (_, a), (name, b) in itertools.pairwise(marks)}
    return {"done": len(done), "seconds": marks[-1][1] - marks[0][1], "steps": steps}


def phase_make_run(work: Path, trials: int) -> dict[str, object]:
    """Write the synthetic run once: run.json from a real plan, and `trials` trial records."""
    from orchestrator.core.config import read_inventory, read_matrix
    from orchestrator.core.plan import make_plan
    from orchestrator.store.manifest import save_manifest
    from orchestrator.store.planrecord import make_manifest

    run_dir = work / "run"
    run_dir.mkdir()
    matrix_path = work / "resume.yaml"
    matrix_path.write_text(resume_matrix_yaml(max(1, -(-trials // 8))))
    inventory = read_inventory(work / "inventory.yaml")
    plan = make_plan(read_matrix(matrix_path), inventory.testbed("bench"))
    # the whole plan in plan.json; `trials` of it done (all of it when trials is a multiple of 8)
    t0 = time.perf_counter()
    save_manifest(run_dir, make_manifest(plan, inventory, "bench-resume", "2026-05-09T07:00:00.000+00:00"))
    manifest_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with open(run_dir / "journal.jsonl", "w", encoding="utf-8") as out:
        for step in plan.steps[:trials]:
            out.write(_record(step).model_dump_json() + "\n")
    # the status index Journal.append keeps beside the journal (the same bytes; tested in
    # tests/test_journal_speed_logic.py), built in one go here instead of 100,000 fsync'd appends
    from orchestrator.store.journal import write_index

    write_index(run_dir / "journal.jsonl")
    size = (run_dir / "journal.jsonl").stat().st_size
    return {
        "trials": min(trials, len(plan.steps)),
        "mb": size / 1e6,
        "seconds": time.perf_counter() - t0,
        "planned": len(plan.steps),
        "manifest_s": manifest_s,
    }


def phase_load_manifest(work: Path) -> dict[str, object]:
    """The manifest with every planned trial as a model: what the report loads."""
    from orchestrator.store.manifest import load_manifest

    t0 = time.perf_counter()
    manifest = load_manifest(work / "run")
    return {"planned": len(manifest.plan), "seconds": time.perf_counter() - t0}


def _record(step):  # type: ignore[no-untyped-def]
    """A realistic completed trial: env, restarts, health waits, repro outcome, metrics, logs."""
    from orchestrator.core.records import MetricValue, ReproOutcome, TrialRecord

    i, cell = step.trial.index, step.trial.cell
    k = (i * 7919) % 7
    tail = (
        f'wall=161.{i % 10}s counts={{"done": {40 - k}, "no_tool": {k}}}\n'
        f"CORRUPTION sessions: {k}/40 = {k * 100 // 40}%\n"
    )
    return TrialRecord(
        run_id="bench-resume",
        trial=i,
        round=step.trial.round,
        cell=cell.id,
        levels=cell.as_dict(),
        is_baseline=step.trial.is_baseline,
        testbed="bench",
        status="completed",
        started=f"2026-05-09T07:{i // 3600 % 60:02d}:{i % 60:02d}.000+00:00",
        ended=f"2026-05-09T07:{i // 3600 % 60:02d}:{i % 60:02d}.900+00:00",
        duration_s=163.2,
        env={r: {k2: str(v) for k2, v in a.items()} for r, a in step.env.items()},
        restarted=[f"{r}:{u}" for r, u in step.restart_units],
        health_wait_s={"prefill": 1.21, "decode": 1.43, "router": 0.11},
        repro=ReproOutcome(
            command="python -m orchestrator.sim.repro --sessions 40",
            exit_code=0,
            duration_s=161.4,
            stdout_tail=tail,
            stdout_path=f"trials/{i:06d}/repro.out",
            stderr_path=f"trials/{i:06d}/repro.err",
        ),
        metrics={
            "corruption": MetricValue(kind="proportion", k=k, n=40),
            "wall": MetricValue(kind="number", value=161.4, unit="s"),
            "anomalies": MetricValue(kind="number", value=float(300 + k)),
        },
        logs={"decode:bench-decode": f"trials/{i:06d}/logs/decode-bench-decode.log"},
    )


def child(argv: list[str]) -> None:
    name, work = argv[0], Path(argv[1])
    os.chdir(work)
    if name == "plan":
        result = phase_plan(work, argv[2], int(argv[3]), int(argv[4]))
    elif name == "make_run":
        result = phase_make_run(work, int(argv[2]))
    elif name == "load_manifest":
        result = phase_load_manifest(work)
    elif name == "read_journal":
        result = phase_read_journal(work)
    else:
        result = phase_resume(work, argv[2])
    print(json.dumps({**result, "peak_rss_mb": peak_rss_mb()}))


# ----------------------------------------------------------------------------- parent
@dataclass(frozen=True)
class Outcome:
    result: dict[str, object] | None  # None: stopped at the time limit
    wall_s: float


def run_phase(work: Path, limit_s: float, *args: str) -> Outcome:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", *args], cwd=work, capture_output=True, text=True, timeout=limit_s
        )
    except subprocess.TimeoutExpired:
        return Outcome(None, time.perf_counter() - t0)
    if proc.returncode != 0:
        raise SystemExit(f"bench_controller: phase {args[0]} failed:\n{proc.stderr[-3000:]}")
    return Outcome(json.loads(proc.stdout.strip().splitlines()[-1]), time.perf_counter() - t0)


def report_plan(work: Path, factors: int, levels: int, limit_s: float) -> None:
    sizes = [(order, factors) for order in ORDERS]
    if factors > 1:  # min-restarts is quadratic: show how it grows from a smaller size
        sizes.insert(2, ("min-restarts", factors - 1))
    for order, n in sizes:
        out = run_phase(work, limit_s, "plan", str(work), order, str(n), str(levels))
        label = f"plan {levels**n:,} cells, order {order}:"
        if out.result is None:
            print(f"{label} NOT finished within {limit_s:g} s (stopped)")
            continue
        r = out.result
        print(
            f"{label} make_plan {r['plan_s']:.3f} s (+ read matrix/inventory {r['read_s']:.3f} s); "
            f"{r['restarts']:,} restarts planned; peak RSS {r['peak_rss_mb']:.0f} MB (target <= 1 s)"
        )


def report_journal(work: Path, trials: int, limit_s: float) -> None:
    made = run_phase(work, max(limit_s, 600), "make_run", str(work), str(trials))
    assert made.result is not None
    print(
        f"synthetic run: {made.result['trials']:,} trial records, journal {made.result['mb']:.0f} MB "
        f"(written in {made.result['seconds']:.1f} s)"
    )
    print(
        f"run start: make_manifest + save_manifest (run.json + plan.json) of {made.result['planned']:,} "
        f"planned trials in {made.result['manifest_s']:.3f} s"
    )
    loaded = run_phase(work, limit_s, "load_manifest", str(work))
    if loaded.result is not None:
        print(
            f"load_manifest with the plan ({loaded.result['planned']:,} PlannedTrial models, what the report "
            f"loads): {loaded.result['seconds']:.3f} s; peak RSS {loaded.result['peak_rss_mb']:.0f} MB"
        )
    read = run_phase(work, limit_s, "read_journal", str(work))
    if read.result is None:
        print(f"read_journal: NOT finished within {limit_s:g} s")
    else:
        print(
            f"read_journal: {read.result['trials']:,} trials in {read.result['seconds']:.3f} s; "
            f"peak RSS {read.result['peak_rss_mb']:.0f} MB (target <= 1 s)"
        )
    readers = ["read_journal", "trial_statuses-no-index", "trial_statuses"]
    for reader in readers:
        resume = run_phase(work, limit_s, "resume", str(work), reader)
        if resume.result is None:
            print(f"resume preparation ({reader}): NOT finished within {limit_s:g} s")
            continue
        r = resume.result
        print(
            f"resume preparation, done set by {reader}: {r['done']:,} done trials found in {r['seconds']:.3f} s; "
            f"peak RSS {r['peak_rss_mb']:.0f} MB (target <= 1 s)"
        )
        for step, seconds in r["steps"].items():  # type: ignore[union-attr]
            print(f"  {seconds:7.3f} s  {step}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    from orchestrator.core.model import MAX_CELLS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--factors", type=int, default=4)
    p.add_argument("--levels", type=int, default=8, help="levels per factor (cells = levels ** factors)")
    p.add_argument("--trials", type=int, default=100_000, help="trial records in the synthetic journal")
    p.add_argument("--limit", type=float, default=60.0, help="stop a measurement after this many seconds")
    args = p.parse_args(argv)
    cells = args.levels**args.factors
    if cells > MAX_CELLS:  # read_matrix refuses it: say so before any work, not with its traceback
        raise SystemExit(
            f"bench_controller: {cells:,} cells is over orch's limit of {MAX_CELLS:,} (core.model.MAX_CELLS)"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1:])
        return 0
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="orch-bench-ctl-"))
    try:
        (work / "inventory.yaml").write_text(inventory_yaml())
        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; each figure from a fresh process")
        report_plan(work, args.factors, args.levels, args.limit)
        report_journal(work, args.trials, args.limit)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
