"""One sweep session on 1..N testbeds: the run directory appears whole, no testbed holds another
run's changes, and the plan's trials run on every connected deployment at once.

Several testbeds are full copies of one deployment, each with its own runner, lock and restore;
the runners take the plan's trials from one shared queue, in plan order, and write one shared
journal (each record names its testbed). A testbed therefore stays sequential and locked, and
N testbeds give close to N times the trials per hour. One testbed is the same call: `execute`
alone decides how (the runner directly, or one runner thread per testbed).

Ctrl-C / SIGTERM reach the main thread only: with several testbeds it tells every runner to
stop, and each one finishes its current step, restores its testbed and returns.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from orchestrator.core.model import Testbed
from orchestrator.core.plan import Plan
from orchestrator.core.records import RunManifest, TrialRecord
from orchestrator.edges.deployment import Deployment, connect
from orchestrator.edges.lock import TestbedLock
from orchestrator.errors import Interrupted, PreflightError, UsageError
from orchestrator.store.manifest import save_manifest
from orchestrator.store.rundir import RunDir
from orchestrator.sweep.runner import (
    Progress,
    Runner,
    RunOptions,
    RunResult,
    SharedJournal,
    host_backup_path,
    unrestored_runs,
)
from orchestrator.sweep.sources import SourceFactory


@contextmanager
def connected(testbeds: Sequence[Testbed]) -> Iterator[list[Deployment]]:
    """A deployment per testbed, all closed on the way out (also those opened before a failure)."""
    deployments: list[Deployment] = []
    try:
        for testbed in testbeds:
            deployments.append(connect(testbed))
        yield deployments
    finally:
        for d in deployments:
            d.close()


def create_run_dir(run_dir: Path, manifest: RunManifest) -> None:
    """Create the run directory with its run.json and plan.json in one step (a staging folder
    renamed into place), so a controller killed here leaves either no run directory or one that
    `orch resume` can read, never an empty or half-written one that blocks its run id."""
    staging = run_dir.with_name(f".{run_dir.name}.creating-{os.getpid()}")
    try:
        staging.mkdir(parents=True)
    except OSError as exc:
        raise UsageError(
            f"cannot create run directory {run_dir}: {exc.strerror}",
            hint=_RUN_DIR_HINTS.get(exc.errno or 0, "check --out"),
        ) from None
    try:
        save_manifest(staging, manifest)
        try:
            os.rename(staging, run_dir)
        except OSError as exc:  # e.g. another orch created the same run id a moment ago
            raise UsageError(
                f"cannot create run directory {run_dir}: {exc.strerror}", hint="pick another --run-id"
            ) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


_RUN_DIR_HINTS = {
    errno.ENOTDIR: "a parent of this path is a file, not a directory",
    errno.EROFS: "the file system is read-only: choose another --out",
    errno.EACCES: "permission denied: choose another --out",
    errno.ENOSPC: "the disk is full",
}


def check_no_unrestored_run(deployment: Deployment, run_id: str, reports_dir: Path) -> None:
    """Refuse to start on hosts that still hold another run's changes (a killed run whose hosts
    were never restored): the "originals" saved now would be that run's cell, and restoring them
    would leave the hosts changed for good."""
    for handle in deployment.hosts.values():
        for other in unrestored_runs(handle):
            if other == run_id:
                continue
            run_dir = reports_dir / other
            how = f"orch restore {run_dir}" if RunDir(run_dir).is_run() else f"orch restore RUN_DIR (of run {other})"
            raise PreflightError(
                f"{handle.host.label}: {handle.host.env_file} still holds the changes of run {other}, "
                f"whose hosts were never restored; nothing was changed",
                hint=f"run `{how}` first; its original is in {host_backup_path(handle.host.env_file, other)}",
            )


def execute(
    plan: Plan,
    deployments: Sequence[Deployment],
    run_dir: Path,
    options: RunOptions,
    done: set[int],
    *,
    locks: Sequence[TestbedLock] | None = None,
    resume: bool = False,
    progress: Progress,
    source: SourceFactory,
) -> RunResult:
    """Run the plan's remaining trials on the deployments (one or several), taking them from what
    `source` makes; every testbed is restored before this returns. The one place that decides how
    N testbeds are driven."""
    if len(deployments) == 1:  # the runner in this thread: it handles Ctrl-C and SIGTERM itself
        runner = Runner(plan, deployments[0], run_dir, options, progress=progress)
        lock = locks[0] if locks else None
        return runner.execute(done, resume=resume, lock=lock, source=source(runner.cell_decided))
    return _execute_parallel(plan, deployments, run_dir, options, done, locks, resume, progress, source)


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


def _execute_parallel(
    plan: Plan,
    deployments: Sequence[Deployment],
    run_dir: Path,
    options: RunOptions,
    done: set[int],
    locks: Sequence[TestbedLock] | None,
    resume: bool,
    progress: Progress,
    make_source: SourceFactory,
) -> RunResult:
    """A runner thread per deployment, all fed from one step source; their results merged."""
    journal = SharedJournal(RunDir(run_dir).journal)
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
    source = make_source(runners[0].cell_decided)
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
