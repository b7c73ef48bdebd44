"""What `orch run` and `orch restore` do around the runner: connect, preflight, create the run
directory and manifest, run, write the report and the index, print where it is.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from .config import Inventory, read_inventory
from .deployment import Deployment, connect, preflight
from .errors import OrchError, UsageError
from .plan import Plan
from .progress import RichProgress
from .records import RunManifest
from .runner import QuietProgress, RunOptions, Runner, now_iso
from .runs import check_run_id, load_manifest, make_manifest, new_run_id, save_manifest


def run_sweep(plan: Plan, inventory: Inventory, args: argparse.Namespace, out: Console, err: Console) -> int:
    reports_dir: Path = args.out
    run_id = check_run_id(args.run_id) if args.run_id else new_run_id(plan.matrix.name, reports_dir)
    run_dir = reports_dir / run_id
    if run_dir.exists():
        raise UsageError(f"{run_dir} already exists", hint="pick another --run-id")
    deployment = connect(plan.testbed)
    try:
        if not args.skip_preflight:
            preflight(deployment)
        _make_run_dir(run_dir)
        manifest = make_manifest(plan, inventory, run_id, now_iso())
        save_manifest(run_dir, manifest)
        err.print(f"run {run_id}: {len(plan.steps)} trials on {plan.testbed.name} -> {run_dir}", markup=False)
        runner = Runner(plan, deployment, run_dir,
                        RunOptions(run_id, fail_fast=args.fail_fast, infra_attempts=1 + max(0, args.retries)),
                        progress=RichProgress(err))
        result = runner.execute()
    finally:
        deployment.close()
    status = "interrupted" if result.interrupted else ("failed" if result.failed else "completed")
    save_manifest(run_dir, manifest.model_copy(update={"ended": now_iso(), "status": status}))
    report = _write_report(run_dir, err)
    out.print(f"{result.completed} trials completed, {result.failed} failed"
              + (" (interrupted)" if result.interrupted else ""))
    if report:
        out.print(f"report: {report}", markup=False)
    if result.interrupted:
        return 130
    return 1 if result.failed else 0


def _make_run_dir(run_dir: Path) -> None:
    try:
        run_dir.mkdir(parents=True)
    except OSError as exc:
        raise UsageError(f"cannot create run directory {run_dir}: {exc.strerror}") from None


def _write_report(run_dir: Path, err: Console) -> Path | None:
    from .render import write_report
    from .site import write_index

    try:
        path = write_report(run_dir)
        write_index(run_dir.parent)
        return path
    except OrchError as exc:
        err.print(f"[yellow]report not written:[/yellow] {escape(str(exc))}")
        return None


def restore_run(run_dir: Path, out: Console, err: Console) -> int:
    """Restore the hosts of a run whose controller died (kill -9, power cut)."""
    manifest = load_manifest(run_dir)
    inventory = _inventory_of(manifest)
    deployment = connect(inventory.testbed(manifest.testbed))
    try:
        runner = Runner(_empty_plan(manifest, inventory, deployment), deployment, run_dir,
                        RunOptions(manifest.run_id), progress=QuietProgress())
        runner.adopt_backup()
        left = runner.restore()
    finally:
        deployment.close()
    if left:
        err.print(f"not restored: {', '.join(left)}", markup=False)
        return 1
    out.print(f"restored: {', '.join(deployment.hosts)} (env files byte-identical, units back)", markup=False)
    return 0


def _inventory_of(manifest: RunManifest) -> Inventory:
    path = Path(manifest.inventory_path)
    if not path.exists():
        raise UsageError(f"inventory {path} of run {manifest.run_id} not found", hint="run from the same folder")
    inventory = read_inventory(path, manifest.inventory_path)
    if inventory.sha256 != manifest.inventory_sha256:
        raise UsageError(f"inventory {path} changed since run {manifest.run_id}",
                         hint="restore with the inventory the run used (its text is in run.json)")
    return inventory


def _empty_plan(manifest: RunManifest, inventory: Inventory, deployment: Deployment) -> Plan:
    """Restore needs no matrix; a plan shell carries the testbed for the restart order."""
    return Plan(matrix=None, testbed=deployment.testbed, seed=manifest.seed,  # type: ignore[arg-type]
                replicates=manifest.replicates, cells=(), steps=())
