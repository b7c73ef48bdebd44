"""One sweep across several testbeds at once (`orch run MATRIX -t a,b,c` or `-t all`).

Each testbed is a full copy of the deployment with its own runner, lock and restore; the
runners take the plan's trials from one shared queue, in plan order, and write one shared
journal (each record names its testbed). A testbed therefore stays sequential and locked, and
N testbeds give close to N times the trials per hour. The report checks whether testbeds differ.

Ctrl-C / SIGTERM reach the main thread only: it tells every runner to stop, and each one
finishes its current step, restores its testbed and returns.
"""

from __future__ import annotations

import argparse
import dataclasses
import threading
from pathlib import Path

from rich.console import Console

from orchestrator.core.config import Inventory, Testbed
from orchestrator.core.plan import Plan
from orchestrator.core.records import TrialRecord
from orchestrator.edges.deployment import Deployment, connect, preflight
from orchestrator.edges.lock import TestbedLock
from orchestrator.errors import Interrupted, UsageError
from orchestrator.store.manifest import check_run_id, make_manifest, new_run_id
from orchestrator.sweep.adaptive import make_source
from orchestrator.sweep.runner import Progress, Runner, RunOptions, RunResult, SharedJournal, now_iso


class _SharedProgress:
    """One progress display for all runners: they report trials; the coordinator starts/stops."""

    def __init__(self, inner: Progress, testbed: str, lock: threading.Lock) -> None:
        self.inner, self.testbed, self.lock = inner, testbed, lock

    def start(self, total: int, done: int) -> None: ...

    def stop(self) -> None: ...

    def trial_done(self, record: TrialRecord) -> None:
        with self.lock:
            self.inner.trial_done(record)

    def retotal(self, left: int) -> None:
        with self.lock:
            self.inner.retotal(left)

    def note(self, message: str) -> None:
        with self.lock:
            self.inner.note(f"[{self.testbed}] {message}")


def run_parallel(
    plan: Plan, testbeds: list[Testbed], inventory: Inventory, args: argparse.Namespace, out: Console, err: Console
) -> int:
    from orchestrator.sweep.session import _create_run_dir, _finish, check_no_unrestored_run, sweep_progress

    reports_dir: Path = args.out
    run_id = check_run_id(args.run_id) if args.run_id else new_run_id(plan.matrix.name, reports_dir)
    run_dir = reports_dir / run_id
    if run_dir.exists():
        raise UsageError(f"{run_dir} already exists", hint="pick another --run-id")
    deployments = [connect(tb) for tb in testbeds]
    locks = [TestbedLock.for_run(d, run_id, now_iso()) for d in deployments]
    try:
        for d in deployments:
            if not args.skip_preflight:
                for warning in preflight(d, plan):
                    err.print(f"warning: {warning}", markup=False)
        for d, lock in zip(deployments, locks):
            lock.acquire(break_stale=args.break_lock)
            check_no_unrestored_run(d, run_id, reports_dir)
        manifest = make_manifest(plan, inventory, run_id, now_iso())
        manifest = manifest.model_copy(update={"testbed": ",".join(tb.name for tb in testbeds)})
        _create_run_dir(run_dir, manifest)
        err.print(
            f"run {run_id}: {len(plan.steps)} trials across {len(testbeds)} testbeds "
            f"({', '.join(tb.name for tb in testbeds)}) -> {run_dir}",
            markup=False,
        )
        options = RunOptions(
            run_id,
            fail_fast=args.fail_fast,
            infra_attempts=1 + max(0, args.retries),
            break_lock=args.break_lock,
            deadline=getattr(args, "deadline", None),
        )
        result = execute_parallel(
            plan, deployments, run_dir, options, set(), locks=locks, progress=sweep_progress(args, run_dir, err)
        )
    finally:
        for lock in locks:
            lock.release()
        for d in deployments:
            d.close()
    return _finish(run_dir, manifest, result, out, err, args)


def execute_parallel(
    plan: Plan,
    deployments: list[Deployment],
    run_dir: Path,
    options: RunOptions,
    done: set[int],
    *,
    locks: list[TestbedLock] | None = None,
    resume: bool = False,
    progress: Progress,
    prior: list[TrialRecord] | None = None,
) -> RunResult:
    """Run the plan's remaining trials on all deployments at once; merge their results."""
    journal = SharedJournal(run_dir / "journal.jsonl")
    lock = threading.Lock()
    runners = [
        Runner(
            dataclasses.replace(plan, testbed=d.testbed),
            d,
            run_dir,
            dataclasses.replace(options, backup_subdir=d.testbed.name),
            progress=_SharedProgress(progress, d.testbed.name, lock),
        )
        for d in deployments
    ]
    source = make_source(plan.steps, done, plan.matrix, prior or [], runners[0].cell_decided)
    results: list[RunResult | None] = [None] * len(runners)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            results[i] = runners[i].execute(
                done, resume=resume, lock=locks[i] if locks else None, source=source, journal=journal
            )
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread below
            errors.append(exc)
            source.close()

    threads = [
        threading.Thread(target=work, args=(i,), name=f"testbed-{d.testbed.name}") for i, d in enumerate(deployments)
    ]
    progress.start(len(plan.steps), len(done))
    interrupted = False
    try:
        for t in threads:
            t.start()
        interrupted = _join_all(threads, runners)
    finally:
        progress.stop()
        journal.close()  # only once every runner has restored its testbed and returned
    if errors and not all(isinstance(e, (KeyboardInterrupt, Interrupted)) for e in errors):
        raise next(e for e in errors if not isinstance(e, (KeyboardInterrupt, Interrupted)))
    merged = _merge(run_dir, [r for r in results if r is not None])
    merged.interrupted = merged.interrupted or interrupted or bool(errors)
    return merged


def _join_all(threads: list[threading.Thread], runners: list[Runner]) -> bool:
    """Wait for every runner to return (each restores its own testbed before it does). Ctrl-C or
    SIGTERM, which reach only this thread, tell all runners to stop; waiting goes on, so the
    journal is never closed under a runner that is still restoring. Returns True if interrupted."""
    interrupted = False
    while True:
        try:
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(timeout=0.2)
            return interrupted
        except (KeyboardInterrupt, Interrupted):
            interrupted = True
            for r in runners:
                r.stopping.set()


def _merge(run_dir: Path, results: list[RunResult]) -> RunResult:
    merged = RunResult(run_dir)
    for r in results:
        merged.completed += r.completed
        merged.failed += r.failed
        merged.interrupted = merged.interrupted or r.interrupted
        merged.deadline_reached = merged.deadline_reached or r.deadline_reached
        merged.records += r.records
        merged.not_restored += r.not_restored
        for role, info in r.provenance.items():  # testbeds are copies: the first one describes them
            merged.provenance.setdefault(role, info)
    return merged
