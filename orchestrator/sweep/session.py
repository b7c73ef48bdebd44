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

from orchestrator.core.inventory import Testbed, host_where
from orchestrator.core.records import RunManifest
from orchestrator.edges.connect import connect
from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.edges.lock import host_restore_command
from orchestrator.errors import ConnectError, OrchError, PreflightError, UsageError
from orchestrator.store.atomic import write_json_atomic
from orchestrator.store.liveness import first_status
from orchestrator.store.manifest import save_manifest
from orchestrator.store.rundir import RunDir
from orchestrator.store.runlock import lock_refusal
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


@contextmanager
def at_lines(testbeds: Sequence[Testbed], inventory: str) -> Iterator[None]:
    """A host orch cannot connect to, outside preflight (`orch resume`, `orch restore`, a run under
    --skip-preflight), is said at the inventory line of its `ssh:` address (or key: a refused
    login), as preflight says it, where it named no line. `inventory`: the file as the user named it."""
    try:
        yield
    except ConnectError as exc:
        host = next((h for tb in testbeds for h in tb.hosts.values() if h.label == exc.host), None)
        if host is not None:
            exc.locate(host_where(host, inventory, exc.about))
        raise


def create_run_dir(run_dir: Path, manifest: RunManifest) -> None:
    """Create the run directory with its run.json, plan.json and status.json in one step (a
    staging folder renamed into place), so a controller killed here leaves either no run directory
    or one that `orch resume` can read and `orch status` shows, never an empty or half-written one
    that blocks its run id."""
    staging = run_dir.with_name(f".{run_dir.name}.creating-{os.getpid()}")
    try:
        staging.mkdir(parents=True)
    except OSError as exc:
        raise UsageError(
            f"cannot create run directory {run_dir}: {exc.strerror}",
            hint=_RUN_DIR_HINTS.get(exc.errno or 0, "check --out"),
        ) from None
    try:
        refused = lock_refusal(staging, run_dir)
        if refused:
            raise UsageError(refused)
        save_manifest(staging, manifest)
        # the folder appears with its controller named: `orch status` lists a run killed from here on
        write_json_atomic(RunDir(staging).status_json, first_status(manifest))
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
    would leave the hosts changed for good. A host whose env file differs from that run's copy of
    its original is named first; when every such file holds its original again (a restore that
    wrote the file back, then failed on a unit) the message says so instead of "still holds the
    changes", which sent users looking for an edit that is not there. `inventory` (this run's) is
    named in the advice when the run's folder is not there. Copies of this new run's own id count
    too: an earlier start under that id (`queue run` starts an item again under the id its dead
    start's lock names) left them, so it changed the hosts and taking its lock over would be wrong."""
    left = [(h, other) for h in deployment.hosts.values() for other in unrestored_runs(h)]
    if not left:
        return
    changed = [(h, other) for h, other in left if not _holds_original(h, other)]
    handle, other = (changed or left)[0]
    run_dir = reports_dir / other
    how = f"orch restore {run_dir}"
    if not RunDir(run_dir).is_run():  # its folder is elsewhere, or gone: the hosts' own copies
        from_hosts = host_restore_command(deployment.testbed.name, other, str(inventory or ""))
        how = f"orch restore RUN_DIR` (of run {other}), or if its folder is gone `{from_hosts}"
    env, copy = handle.host.env_file, host_backup_path(handle.host.env_file, other)
    if changed:
        whose = "an earlier start of this run" if other == run_id else "run"
        what = f"{env} still holds the changes of {whose} {other}, whose hosts were never restored"
        hint = f"run `{how}` first; its original is in {copy}"
    else:
        what = (
            f"run {other} never finished restoring this host: {env} holds its original again, but its "
            f"units may not be as they were ({copy} is still there)"
        )
        hint = f"run `{how}` first: it puts the units back and removes {copy}"
    raise PreflightError(f"{handle.host.label}: {what}; nothing was changed", hint=hint)


def _holds_original(handle: HostHandle, other: str) -> bool:
    """Does the env file hold, byte for byte, what run `other` saved as its original? (Unknown
    counts as no: the file may hold that run's cell.)"""
    try:
        now = handle.transport.read_bytes(handle.host.env_file)
        return now == handle.transport.read_bytes(host_backup_path(handle.host.env_file, other))
    except OrchError:
        return False
