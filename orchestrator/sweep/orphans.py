"""Repros a killed controller left running, stopped before a resume or a restore does anything.

Why: a local repro runs in its own session (so a timeout kills all it started), which also means
a kill -9 of the controller does not stop it, and nothing else enforces its timeout. Left alone it
keeps loading the deployment while `orch resume` re-runs its trial (a trial is data only if orch's
own processes served it) and keeps writing where that trial's output used to be. Each running
repro's process group is recorded in its trial folder (edges.workload); the caller holds the run
(its controller lock or its testbed lock), so the process that recorded it is gone.

A repro on a host (`repro.on: <role>`) outlives the kill -9 the same way: the SSH connection dies
with the controller, and closing it does not stop the command (edges.transport.ssh), whose timeout
(coreutils `timeout` on the host) may be far off. Its trial folder records, before it starts and
until its own leftover check ran (sweep.phases; store.remoterepro), its testbed, host key, mark and transient scope
(edges.remote_scope; none where the host has none): once that host is connected, resume and restore
stop what carries the mark or is in the scope there (edges.remote_leftovers, one round trip). A
host that cannot be reached keeps the record for the next try, and is said.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.edges.leftovers import RUN_VAR, is_mark
from orchestrator.edges.remote_leftovers import stop_marked, stop_run
from orchestrator.edges.remote_scope import is_repro_unit, run_units
from orchestrator.edges.workload import KILL_GRACE_S, stop_recorded_group
from orchestrator.errors import OrchError
from orchestrator.store import remoterepro
from orchestrator.store.remoterepro import RemoteRepro
from orchestrator.store.rundir import RunDir, TrialDir

if TYPE_CHECKING:
    from orchestrator.core.redact import Redactor
    from orchestrator.edges.deployment import Deployment


def _trusted(trial: TrialDir) -> RemoteRepro | None:
    """The trial's record of a repro on a host, or None: none, or not one orch wrote. Its mark is
    a mark's form and its scope only ever the mark's own unit (edges.remote_scope.is_repro_unit),
    so a record edited by hand cannot make orch stop another unit or send another command."""
    repro = remoterepro.recorded(trial)
    if repro is None or not is_mark(repro.mark):
        return None
    if repro.scope is not None and not is_repro_unit(repro.scope, repro.mark):
        return None
    return repro


def stop_orphaned_repros(run_dir: Path | RunDir) -> list[str]:
    """Stop every repro recorded as running in the run's trial folders; one note per repro stopped."""
    notes = []
    for folder in _trial_folders(run_dir):
        pgid = stop_recorded_group(TrialDir(folder).repro_pid)
        if pgid is not None:
            notes.append(
                f"trial {folder.name}: stopped its repro (process group {pgid}), left running by a controller "
                "that was killed"
            )
    return notes


def stop_orphaned_remote_repros(
    run_dir: Path | RunDir, deployments: Iterable[Deployment], redactor: Redactor
) -> list[str]:
    """Stop every repro on a host of `deployments` (connected) recorded in the run's trial folders;
    one note per repro that still ran (naming what was stopped, masked by the run's `redactor`: a
    command line may hold a secret), and one per host that could not be looked at (its record is
    kept for the next resume or restore). Records of other testbeds are left to their own call."""
    hosts = {(d.testbed.name, key): h for d in deployments for key, h in d.hosts.items()}
    notes = []
    for folder in _trial_folders(run_dir):
        trial = TrialDir(folder)
        repro = _trusted(trial)
        if repro is None:
            remoterepro.forget(trial)
            continue
        h = hosts.get((repro.testbed, repro.host))
        if h is None:
            continue
        try:
            left = stop_marked(h.transport, repro.mark, settle_s=0.0, grace_s=KILL_GRACE_S, scope=repro.scope)
        except OrchError as exc:
            notes.append(
                redactor.text(
                    f"trial {folder.name}: cannot stop its repro on {h.host.label}, left running by a controller "
                    f"that was killed: {exc} (the next resume or restore tries again)"
                )
            )
            continue
        remoterepro.forget(trial)
        if left:
            notes.append(
                redactor.text(
                    f"trial {folder.name}: stopped its repro on {h.host.label} ({', '.join(left)}), left running by "
                    "a controller that was killed"
                )
            )
    return notes


def stop_run_repros_on_hosts(deployment: Deployment, run_id: str, redactor: Redactor) -> list[str]:
    """Stop what run `run_id`'s repros still run on the hosts of `deployment` (connected), found by
    the run's entry in their environment or the run's scopes (edges.remote_leftovers.stop_run), for
    a restore whose run folder, with each repro's recorded mark, is gone. One note per host where
    something was stopped (its command lines masked by `redactor`) and per host that could not be
    looked at."""
    notes = []
    scopes = run_units(run_id)
    for h in deployment.hosts.values():
        try:
            left = stop_run(h.transport, run_id, grace_s=KILL_GRACE_S)
        except OrchError as exc:
            notes.append(
                redactor.text(
                    f"cannot look for run {run_id}'s repros: {exc}; any still running there carry "
                    f"{RUN_VAR}={run_id} in their environment or run in a scope {scopes} "
                    f"(find them: grep -l -a {RUN_VAR}={run_id} /proc/*/environ; systemctl status '{scopes}')"
                )
            )
            continue
        if left:
            notes.append(
                redactor.text(
                    f"stopped on {h.host.label} what run {run_id}'s repro left running when its controller was "
                    f"killed: {', '.join(left)}"
                )
            )
    return notes


def _trial_folders(run_dir: Path | RunDir) -> list[Path]:
    try:
        return sorted(p for p in RunDir.of(run_dir).trials.iterdir() if p.is_dir())
    except OSError:  # no trial ran yet (or an unreadable folder, which the run's own reads report)
        return []
