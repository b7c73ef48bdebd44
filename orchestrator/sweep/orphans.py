"""Repros a killed controller left running, stopped before a resume or a restore does anything.

Why: a local repro runs in its own session (so a timeout kills all it started), which also means
a kill -9 of the controller does not stop it, and nothing else enforces its timeout. Left alone it
keeps loading the deployment while `orch resume` re-runs its trial (a trial is data only if orch's
own processes served it) and keeps writing where that trial's output used to be. Each running
repro's process group is recorded in its trial folder (edges.workload); the caller holds the run
(its controller lock or its testbed lock), so the process that recorded it is gone.

Left: a repro on a host (`repro.on: <role>`) runs through the transport, which records no remote
process group; one orphaned there by a kill -9 runs until it ends by itself.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.edges.workload import stop_recorded_group
from orchestrator.store.rundir import RunDir, TrialDir


def stop_orphaned_repros(run_dir: Path | RunDir) -> list[str]:
    """Stop every repro recorded as running in the run's trial folders; one note per repro stopped."""
    run = RunDir.of(run_dir)
    try:
        folders = sorted(p for p in run.trials.iterdir() if p.is_dir())
    except OSError:  # no trial ran yet (or an unreadable folder, which the run's own reads report)
        return []
    notes = []
    for folder in folders:
        pgid = stop_recorded_group(TrialDir(folder).repro_pid)
        if pgid is not None:
            notes.append(
                f"trial {folder.name}: stopped its repro (process group {pgid}), left running by a controller "
                "that was killed"
            )
    return notes
