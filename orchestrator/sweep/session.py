"""One sweep session on 1..N testbeds, before its first trial: every testbed connected (and
closed again however the session ends), the run directory appearing whole, and no testbed
holding another run's changes. Running the trials on the deployments is sweep.runner's
(`execute`)."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from orchestrator.core.inventory import Testbed
from orchestrator.core.records import RunManifest
from orchestrator.edges.connect import connect
from orchestrator.edges.deployment import Deployment
from orchestrator.edges.lock import host_restore_command
from orchestrator.errors import PreflightError, UsageError
from orchestrator.store.manifest import save_manifest
from orchestrator.store.rundir import RunDir
from orchestrator.sweep.hosts import host_backup_path, unrestored_runs


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


def check_no_unrestored_run(
    deployment: Deployment, run_id: str, reports_dir: Path, inventory: Path | None = None
) -> None:
    """Refuse to start on hosts that still hold another run's changes (a killed run whose hosts
    were never restored): the "originals" saved now would be that run's cell, and restoring them
    would leave the hosts changed for good. `inventory` (this run's) is named in the advice."""
    for handle in deployment.hosts.values():
        for other in unrestored_runs(handle):
            if other == run_id:
                continue
            run_dir = reports_dir / other
            how = f"orch restore {run_dir}"
            if not RunDir(run_dir).is_run():  # its folder is elsewhere, or gone: the hosts' own copies
                from_hosts = host_restore_command(deployment.testbed.name, other, str(inventory or ""))
                how = f"orch restore RUN_DIR` (of run {other}), or if its folder is gone `{from_hosts}"
            raise PreflightError(
                f"{handle.host.label}: {handle.host.env_file} still holds the changes of run {other}, "
                f"whose hosts were never restored; nothing was changed",
                hint=f"run `{how}` first; its original is in {host_backup_path(handle.host.env_file, other)}",
            )
