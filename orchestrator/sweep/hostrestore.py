"""`orch restore --testbed NAME [--run-id ID]`: put a testbed's hosts back from the copies a killed
run left on them, when its run folder is gone (SWEEP).

Why: a run keeps each host's original env file twice (sweep.hosts): in its folder's backup/ and
beside the env file on the host (<env_file>.orch-backup-<run_id>). `orch restore RUN_DIR` reads
the folder. A folder deleted after a kill -9 left the hosts edited, the testbed locked by the
dead run, and the hosts' own copies as the only way back, by hand.

Which units ran before the run is also on the hosts, beside each copy (sweep.hostunits): a unit
that ran is restarted on the original env file (or started, if it is down now), one that did not
is stopped if it runs now (the run started it), and the outcome names those it stopped. A copy
left by an orch from before has no such record: there every unit active now is restarted on the
original env file (it may run on a cell's), a stopped one stays stopped, and the outcome names
every unit left running: one the run started, stopped before it, is among them, with how to stop
it. A repro the run left running on a host (`repro.on: ROLE`, its controller killed -9) is found
there by the run's entry in its environment (ORCH_REPRO_RUN=<run_id>, edges.leftovers.RUN_VAR) and,
where it ran in a transient scope, by the scope's name, which holds the run's (edges.remote_scope:
what cleared its environment too), and stopped, under the lock, before any env file is written;
its command line is masked by name and value form only (the run's declared secrets went with the
folder's manifest). What only the folder knew is lost: each repro's mark (trials/), so on a host
without scopes a process that cleared its environment is not found (a repro on the controller is
stopped by its reaper when the controller dies).

Safety, as for `orch restore RUN_DIR`: the testbed lock is taken as the run's own (a live holder,
or another dead run's lock without --break-lock, refuses with nothing touched); a run whose folder
is still there is restored from it instead; every host's copy is checked before any host is
written (a symlink, or a file over the transport's bound, is refused); a host without a copy is
left alone (restored already, or never edited).
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.core.config import read_inventory
from orchestrator.core.redact import Redactor
from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.edges.lock import TestbedLock, host_restore_command, lock_holders
from orchestrator.errors import UsageError
from orchestrator.store.rundir import BackupDir, RunDir
from orchestrator.sweep import session
from orchestrator.sweep.apitypes import HostRestoreRequest, RestoreOutcome, TestbedRestore
from orchestrator.sweep.clock import now_iso
from orchestrator.sweep.hosts import HostGuard, HostState, host_backup_path, unrestored_runs
from orchestrator.sweep.hostunits import host_units_path, read_host_units, read_left_file
from orchestrator.sweep.orphans import stop_run_repros_on_hosts
from orchestrator.sweep.progress import Progress


def restore_from_hosts(request: HostRestoreRequest, progress: Progress) -> RestoreOutcome:
    """Restore the testbed `request` names from its hosts' copies of their env files."""
    if not request.inventory.exists():
        raise UsageError(f"inventory {request.inventory} not found", hint="pass -i INVENTORY (the run's)")
    inventory = read_inventory(request.inventory)
    testbed = inventory.testbed(request.testbed)
    # a host down is said at its inventory's ssh: line, as for `orch restore RUN_DIR`
    with session.at_lines([testbed], str(request.inventory)), session.connected([testbed]) as (deployment,):
        run_id = run_to_restore(deployment, request.run_id)
        restored = restore_testbed(deployment, run_id, progress, break_lock=request.break_lock)
    progress.restore_ended(restored.not_restored)  # (no run folder: no status file to tell)
    again = host_restore_command(testbed.name, run_id, str(request.inventory))
    return RestoreOutcome(None, run_id, (restored,), again=again)


def run_to_restore(deployment: Deployment, given: str | None) -> str:
    """The run whose copies to put back: `given`, else the one run whose lock the testbed holds,
    else the one run whose copies its hosts hold. Several, or none: a UsageError saying which."""
    if given:
        return given
    name = deployment.testbed.name
    locked = {h.run_id for h in lock_holders(deployment).values()}
    copies = {run for h in deployment.hosts.values() for run in unrestored_runs(h)}
    found = locked or copies
    if len(found) == 1:
        return found.pop()
    if not found:
        raise UsageError(f"testbed {name!r}: no run's copy of an env file is on its hosts: nothing to restore")
    raise UsageError(
        f"testbed {name!r}: several runs left copies or locks on its hosts ({', '.join(sorted(found))})",
        hint="say which with --run-id",
    )


def restore_testbed(
    deployment: Deployment, run_id: str, progress: Progress, *, break_lock: bool = False
) -> TestbedRestore:
    """Put back each env file from run `run_id`'s copy beside it, restart the units active now,
    remove the copies, under the testbed's lock taken as that run. Every check (a live holder, the folder, the
    copies) is made before the lock is taken: a refusal leaves the hosts and the lock as they were."""
    lock = TestbedLock.for_run(deployment, run_id, now_iso())
    lock.check(break_stale=break_lock)  # a live run is said as such, not sent to restore from its folder
    _refuse_a_run_with_its_folder(deployment, run_id)
    copies = {key: _copy(h, run_id) for key, h in deployment.hosts.items()}  # all checked before a write
    originals = {key: copy for key, copy in copies.items() if copy is not None}
    if not originals:
        raise UsageError(
            f"testbed {deployment.testbed.name!r}: no host holds a copy of its env file left by run {run_id}",
            hint="its hosts were restored already, or it never edited them",
        )
    before = {key: _units_before(deployment.hosts[key], run_id) for key in originals}  # checked too
    lock.acquire(break_stale=break_lock)
    try:
        for note in stop_run_repros_on_hosts(deployment, run_id, Redactor()):  # a dead run's: we hold its lock
            progress.note(note)
        guard = HostGuard(deployment, BackupDir(Path()), run_id, progress)  # no folder: nothing read from it
        units = _Units()
        for key, original in originals.items():
            active = units.of(key, deployment.hosts[key], before[key])
            guard.states[key] = HostState(original, active, stale=set(deployment.hosts[key].units))  # a cell's env?
        progress.note(units.plan(run_id))
        left = guard.restore(None, again=host_restore_command(deployment.testbed.name, run_id))
    finally:
        lock.release()
    without = tuple(key for key in deployment.hosts if key not in originals)
    # without the run's folder no file is known to be a trial's: what is not the original is kept aside
    kept = tuple(guard.kept.items())
    hosts = tuple(deployment.hosts)
    # named, so that a unit the run started (stopped before it) can be found and stopped again
    running_now = tuple((key, unit) for key, unit in units.unknown if key not in left)
    stopped = tuple((key, unit) for key, unit in units.stopping if key not in left)
    return TestbedRestore(
        deployment.testbed.name,
        hosts,
        True,
        tuple(left),
        already=without,
        kept=kept,
        left_running=running_now,
        stopped=stopped,
        interrupted=guard.interrupted,
    )


class _Units:
    """The units' states a restore without the run folder puts back, host by host: each one's state
    before the run where the host's record says it (sweep.hostunits), else its state now."""

    def __init__(self) -> None:
        self.unknown: list[tuple[str, str]] = []  # running now, not known whether they ran before
        self.stopping: list[tuple[str, str]] = []  # running now, not before the run: to be stopped

    def of(self, key: str, h: HostHandle, record: dict[str, bool] | None) -> dict[str, bool]:
        """unit -> should it run once restored."""
        active: dict[str, bool] = {}
        for unit in h.units:
            now = h.services.state(unit).is_active
            if record is None or unit not in record:
                active[unit] = now
                self.unknown += [(key, unit)] if now else []
                continue
            active[unit] = record[unit]
            self.stopping += [(key, unit)] if now and not record[unit] else []
        return active

    def plan(self, run_id: str) -> str:
        """What the restore will do with the units, said before it does it."""
        gone = f"run {run_id}'s folder is gone"
        stops = "; ".join(f"{key}: {unit}" for key, unit in self.stopping)
        stopping = f", and those it started, not running before it, are stopped ({stops})" if stops else ""
        if not self.unknown:
            return (
                f"{gone}; which units ran before it is read from the record beside each host's copy: the units "
                f"that ran are restarted on the original env files{stopping}"
            )
        return (
            f"{gone}, and with it which units ran before it (a copy without the record of them): the units "
            f"running now are restarted on the original env files, stopped ones are left stopped{stopping}"
        )


def _refuse_a_run_with_its_folder(deployment: Deployment, run_id: str) -> None:
    """The run's folder, if its lock names one that is there, restores better (it knows the units'
    states before the run): that way is asked for, nothing touched."""
    for holder in lock_holders(deployment).values():
        if holder.run_id == run_id and holder.run_dir and RunDir(Path(holder.run_dir)).is_run():
            raise UsageError(
                f"run {run_id}'s folder is there ({holder.run_dir}): nothing was touched",
                hint=f"restore from it: orch restore {holder.run_dir}",
            )


def _copy(h: HostHandle, run_id: str) -> bytes | None:
    """The run's copy of this host's original env file, or None when there is none. A symlink is
    refused (orch writes a regular file there; a link's target would be written into the env file),
    as is a file over the transport's bound (read_bytes)."""
    path = host_backup_path(h.host.env_file, run_id)
    return read_left_file(
        h.transport, h.host.label, path, sudo=_sudo(h), what="copy", hint="put the original back by hand"
    )


def _units_before(h: HostHandle, run_id: str) -> dict[str, bool] | None:
    """The run's record of which of the host's units ran before it (sweep.hostunits), if any."""
    path = host_units_path(h.host.env_file, run_id)
    return read_host_units(h.transport, h.host.label, path, sudo=_sudo(h))


def _sudo(h: HostHandle) -> bool:
    return bool(h.host.ssh and h.host.ssh.sudo)
