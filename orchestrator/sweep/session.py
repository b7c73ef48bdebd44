"""What `orch run` and `orch restore` do around the runner: connect, preflight, create the run
directory and manifest, run, write the report and the index, print where it is.
"""

from __future__ import annotations

import argparse
import errno
import os
import shutil
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from orchestrator.core.config import Inventory, Matrix, read_inventory, read_matrix
from orchestrator.core.plan import Plan, make_plan
from orchestrator.core.records import RunManifest, TrialRecord
from orchestrator.edges.deployment import Deployment, connect, preflight
from orchestrator.edges.lock import TestbedLock
from orchestrator.errors import OrchError, PreflightError, UsageError
from orchestrator.store.journal import read_journal, read_trial_rows, repair_torn_tail, trial_statuses
from orchestrator.store.manifest import (
    check_run_id,
    check_same_plan,
    load_manifest,
    make_manifest,
    new_run_id,
    save_manifest,
)
from orchestrator.sweep.progress import RichProgress
from orchestrator.sweep.runner import (
    Progress,
    Runner,
    RunOptions,
    RunResult,
    host_backup_path,
    now_iso,
    unrestored_runs,
)


def run_sweep(plan: Plan, inventory: Inventory, args: argparse.Namespace, out: Console, err: Console) -> int:
    reports_dir: Path = args.out
    run_id = check_run_id(args.run_id) if args.run_id is not None else new_run_id(plan.matrix.name, reports_dir)
    run_dir = reports_dir / run_id
    if run_dir.exists():
        raise UsageError(f"{run_dir} already exists", hint="pick another --run-id")
    deployment = connect(plan.testbed)
    lock = TestbedLock.for_run(deployment, run_id, now_iso())
    try:
        if not args.skip_preflight:
            for warning in preflight(deployment, plan):
                err.print(f"warning: {warning}", markup=False)
        lock.acquire(break_stale=args.break_lock)
        check_no_unrestored_run(deployment, run_id, reports_dir)
        manifest = make_manifest(plan, inventory, run_id, now_iso())
        _create_run_dir(run_dir, manifest)
        err.print(f"run {run_id}: {len(plan.steps)} trials on {plan.testbed.name} -> {run_dir}", markup=False)
        runner = Runner(
            plan,
            deployment,
            run_dir,
            RunOptions(
                run_id,
                fail_fast=args.fail_fast,
                infra_attempts=1 + max(0, args.retries),
                break_lock=args.break_lock,
                deadline=getattr(args, "deadline", None),
            ),
            progress=sweep_progress(args, run_dir, err),
        )
        result = runner.execute(lock=lock)
    finally:
        lock.release()
        deployment.close()
    return _finish(run_dir, manifest, result, out, err, args)


def sweep_progress(args: argparse.Namespace, run_dir: Path, err: Console) -> Progress:
    """The terminal bar plus status.json (read by `orch status` and `orch serve`); a caller such
    as the queue may pass its own sink as args.progress."""
    given = getattr(args, "progress", None)
    if given is not None:
        return given  # type: ignore[no-any-return]
    from orchestrator.team.livestatus import LiveStatus, Tee

    return Tee(RichProgress(err), LiveStatus(run_dir))


def notify_webhooks(args: argparse.Namespace, run_dir: Path, err: Console) -> None:
    """POST the run's summary to --webhook URLs (and ORCH_WEBHOOKS); never fails the sweep."""
    from orchestrator.team import notify

    hooks = notify.configured(args.webhook)
    if hooks:
        notify.send(notify.summarize_run(run_dir), hooks, warn=lambda m: err.print(f"webhook: {m}", markup=False))


def _finish(
    run_dir: Path,
    manifest: RunManifest,
    result: RunResult,
    out: Console,
    err: Console,
    args: argparse.Namespace | None = None,
) -> int:
    """Record the run's end in the manifest, write the report and index, pick the exit code."""
    finished, failed = _final_counts(run_dir)
    status = "interrupted" if result.interrupted else ("failed" if failed else "completed")
    hosts = {role: {**info, **result.provenance.get(role, {})} for role, info in manifest.hosts.items()}
    save_manifest(run_dir, manifest.model_copy(update={"ended": now_iso(), "status": status, "hosts": hosts}))
    report = _write_report(run_dir, err)
    out.print(
        f"{finished - failed} trials completed, {failed} failed" + (" (interrupted)" if result.interrupted else ""),
        markup=False,
    )
    if result.not_restored:
        out.print(f"NOT restored: {', '.join(result.not_restored)}; finish with: orch restore {run_dir}", markup=False)
    if result.interrupted:
        out.print(f"resume with: orch resume {run_dir}", markup=False)
    if report:
        out.print(f"report: {report}", markup=False)
    if args is not None and getattr(args, "webhook", None):
        notify_webhooks(args, run_dir, err)
    if result.interrupted:
        return 130
    return 1 if failed or result.not_restored else 0


def _final_counts(run_dir: Path) -> tuple[int, int]:
    """(finished trials, failed among them), by each trial's last finished record; fast on big
    journals (compact rows, not full records)."""
    last: dict[int, str] = {}
    for row in read_trial_rows(run_dir / "journal.jsonl").rows:
        if row.status in ("completed", "failed"):
            last[row.trial] = row.status
    return len(last), sum(status == "failed" for status in last.values())


def _final_trials(run_dir: Path) -> list[TrialRecord]:
    """The last finished record of each trial (a resumed run may hold an interrupted one first)."""
    contents = read_journal(run_dir / "journal.jsonl")
    last: dict[int, TrialRecord] = {}
    for r in contents.records:
        if isinstance(r, TrialRecord) and r.status in ("completed", "failed"):
            last[r.trial] = r
    return [last[k] for k in sorted(last)]


def resume_run(run_dir: Path, args: argparse.Namespace, out: Console, err: Console) -> int:
    """Continue an interrupted run with the same plan: finished trials are skipped, the one that
    was running when the controller died is run again."""
    manifest = load_manifest(run_dir, plan=False)  # the stored trials are not needed: their digest is
    matrix = _matrix_of(manifest)
    inventory = _inventory_of(manifest)
    testbeds = [inventory.testbed(name) for name in manifest.testbed.split(",")]
    plan = make_plan(matrix, testbeds[0], manifest.seed, manifest.replicates)
    check_same_plan(run_dir, manifest, plan)
    journal = run_dir / "journal.jsonl"
    if journal.exists() and repair_torn_tail(journal):
        err.print("journal: dropped a torn last line (the controller died while writing it)", markup=False)
    done = set(trial_statuses(journal).finished) if journal.exists() else set()
    prior = _final_trials(run_dir) if journal.exists() and matrix.adaptive else []  # adaptive rebuilds its counts
    if len(done) == len(plan.steps):
        out.print(f"{run_dir}: all {len(done)} trials are already done", markup=False)
    err.print(
        f"resuming {manifest.run_id}: {len(plan.steps) - len(done)} of {len(plan.steps)} trials left", markup=False
    )
    options = RunOptions(
        manifest.run_id, fail_fast=args.fail_fast, break_lock=args.break_lock, deadline=getattr(args, "deadline", None)
    )
    if len(testbeds) > 1:
        from orchestrator.sweep.parallel import execute_parallel

        deployments = [connect(tb) for tb in testbeds]
        try:
            result = execute_parallel(
                plan,
                deployments,
                run_dir,
                options,
                done,
                resume=True,
                progress=sweep_progress(args, run_dir, err),
                prior=prior,
            )
        finally:
            for d in deployments:
                d.close()
        return _finish(run_dir, manifest, result, out, err, args)
    deployment = connect(plan.testbed)
    try:
        runner = Runner(plan, deployment, run_dir, options, progress=sweep_progress(args, run_dir, err))
        result = runner.execute(done, resume=True, prior=prior)
    finally:
        deployment.close()
    return _finish(run_dir, manifest, result, out, err, args)


def _matrix_of(manifest: RunManifest) -> Matrix:
    path = Path(manifest.matrix_path)
    if not path.exists():
        raise UsageError(f"matrix {path} of run {manifest.run_id} not found", hint="run from the same folder")
    matrix = read_matrix(path, manifest.matrix_path)
    if matrix.sha256 != manifest.matrix_sha256:
        raise UsageError(
            f"matrix {path} changed since run {manifest.run_id} started",
            hint="a resumed run must use the same matrix; start a new run instead",
        )
    return matrix


def _create_run_dir(run_dir: Path, manifest: RunManifest) -> None:
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
            how = (
                f"orch restore {run_dir}"
                if (run_dir / "run.json").exists()
                else f"orch restore RUN_DIR (of run {other})"
            )
            raise PreflightError(
                f"{handle.host.label}: {handle.host.env_file} still holds the changes of run {other}, "
                f"whose hosts were never restored; nothing was changed",
                hint=f"run `{how}` first; its original is in {host_backup_path(handle.host.env_file, other)}",
            )


def _write_report(run_dir: Path, err: Console) -> Path | None:
    from orchestrator.report.render import write_report
    from orchestrator.report.site import write_index

    try:
        path = write_report(run_dir)
        write_index(run_dir.parent)
        return path
    except OrchError as exc:
        err.print(f"[yellow]report not written:[/yellow] {escape(str(exc))}")
        return None


def restore_run(run_dir: Path, out: Console, err: Console, break_lock: bool = False) -> int:
    """Restore the hosts of a run whose controller died (kill -9, power cut)."""
    manifest = load_manifest(run_dir)
    inventory = _inventory_of(manifest)
    names = manifest.testbed.split(",")
    code = 0
    for name in names:  # a parallel run keeps each testbed's originals in backup/<testbed>/
        code = max(code, _restore_testbed(run_dir, manifest, inventory, name, len(names) > 1, out, err, break_lock))
    return code


def _restore_testbed(
    run_dir: Path,
    manifest: RunManifest,
    inventory: Inventory,
    name: str,
    parallel: bool,
    out: Console,
    err: Console,
    break_lock: bool,
) -> int:
    deployment = connect(inventory.testbed(name))
    lock = TestbedLock.for_run(deployment, manifest.run_id, now_iso())
    try:
        lock.acquire(break_stale=break_lock)
        runner = Runner(
            _empty_plan(manifest, inventory, deployment),
            deployment,
            run_dir,
            RunOptions(manifest.run_id, backup_subdir=name if parallel else ""),
            progress=RichProgress(err),
        )
        backed_up = runner.adopt_backup()
        if not backed_up:  # killed before its backup was complete: no file was edited
            runner.discard_host_backups()
        left = runner.restore()
    finally:
        lock.release()
        deployment.close()
    if manifest.status == "running":  # its controller died: the run can still be resumed
        save_manifest(run_dir, manifest.model_copy(update={"status": "interrupted", "ended": now_iso()}))
    if left:
        err.print(f"not restored: {', '.join(left)}; run `orch restore {run_dir}` again to finish", markup=False)
        return 1
    if not backed_up:
        out.print(f"nothing to restore: run {manifest.run_id} stopped before its first edit", markup=False)
        return 0
    out.print(f"restored: {', '.join(deployment.hosts)} (env files byte-identical, units back)", markup=False)
    return 0


def _inventory_of(manifest: RunManifest) -> Inventory:
    path = Path(manifest.inventory_path)
    if not path.exists():
        raise UsageError(f"inventory {path} of run {manifest.run_id} not found", hint="run from the same folder")
    inventory = read_inventory(path, manifest.inventory_path)
    if inventory.sha256 != manifest.inventory_sha256:
        raise UsageError(
            f"inventory {path} changed since run {manifest.run_id}",
            hint="restore with the inventory the run used (its text is in run.json)",
        )
    return inventory


def _empty_plan(manifest: RunManifest, inventory: Inventory, deployment: Deployment) -> Plan:
    """Restore needs no matrix; a plan shell carries the testbed for the restart order."""
    return Plan(
        matrix=None,
        testbed=deployment.testbed,
        seed=manifest.seed,  # type: ignore[arg-type]
        replicates=manifest.replicates,
        cells=(),
        steps=(),
    )
