"""Is a run's controller still at work on it? The one answer every view gives (STORE).

A run's manifest says `running` from its start until its controller ends it; a controller killed
with -9 (or a power cut) never gets to, so `running` alone cannot tell a live sweep from a dead
one. The controller's status file (status.json, written by team.livestatus) names its process:
host, pid and that pid's start time (a reused pid is another process). A run whose manifest says
running and whose controller, on this machine, is gone is `stale`: killed, its hosts perhaps still
edited, waiting for `orch resume` or `orch restore`.

Why one module below the views: `orch status` (its table and --json), `orch serve`'s /status,
/api/status and /api/runs, and the runs index (report.site) each decided this on their own, and
disagreed (the JSON said running, with an ETA, of a run the table called stale). Here because
the runs index (report layer) must ask too, and it sits below team.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestrator.core.bounded import MiB, bounded_or_why
from orchestrator.core.filewords import invalid_words
from orchestrator.core.records import RunManifest
from orchestrator.store.processes import process_alive, process_start
from orchestrator.store.rundir import RunDir

STATUS_SCHEMA = 1
MAX_STATUS_BYTES = 1 * MiB  # a status.json is a few KB (its longest fields are a cell name and a note)
STALE: Literal["stale"] = "stale"  # the state shown for a run whose controller is gone (see the module's doc)

LiveState = Literal["running", "stale", "finished"]


def restore_command(run_dir: Path | str) -> str:
    return f"orch restore {run_dir}"


MAX_RESTORE_CHARS = 4200  # a restore command orch writes: `orch restore ` and a path (PATH_MAX 4096)


def recorded_restore(recorded: str, run_dir: Path | str) -> str:
    """The restore command status.json recorded, or orch's own for run_dir when there is none or it
    is longer than any orch writes: the views never cut a restore command, and status.json may
    hold up to MAX_STATUS_BYTES."""
    return recorded if recorded and len(recorded) <= MAX_RESTORE_CHARS else restore_command(run_dir)


def resume_command(run_dir: Path | str) -> str:
    return f"orch resume {run_dir}"


def not_restored_line(not_restored: Sequence[str], run_dir: Path | str, restore_with: str = "") -> str:
    """`NOT restored: ROLES; finish with: orch restore RUN_DIR`: the one wording of a run that left
    hosts changed, wherever it is said (the terminal, an error's note, the queue, status.json and
    the views that read it back). `restore_with`: the command status.json recorded, when any."""
    return f"NOT restored: {', '.join(not_restored)}; finish with: {restore_with or restore_command(run_dir)}"


class StatusFile(BaseModel):
    """What status.json holds. Written by team.livestatus: LiveStatus during a sweep, RestoreStatus
    when a later restore changes what the run left changed; its first version by sweep.session
    (first_status) inside the run folder before that folder appears."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: int = STATUS_SCHEMA
    run_id: str
    name: str
    testbed: str
    host: str
    pid: int
    pid_start: int
    state: Literal["running", "finished"]
    started: str  # when this process started the run (or resumed it)
    updated: str
    done: int
    total: int | None  # None for a hunt: trials done only, never a guessed total
    failed: int
    current_trial: int | None = None
    current_cell: str | None = None
    last: str | None = None  # summary of the last finished trial
    eta_s: float | None = None
    eta_at: str | None = None
    note: str = ""
    # roles the run's restore left changed (`TESTBED/role` for several testbeds) and the command
    # that finishes it: what a teammate must see first. Empty once `orch restore` put them back;
    # absent from files written before orch kept it (they read as empty).
    not_restored: tuple[str, ...] = ()
    restore_with: str = ""


def first_status(manifest: RunManifest) -> StatusFile:
    """The status a run folder is created with: running, nothing done, this process its
    controller. Why before any sweep code runs: between the folder's creation and the runner's
    progress (the testbed locks taken, the run's lock, the runs index written) a killed controller
    left a run that said `running` and no status file, so no view could tell it was dead and
    `orch status` did not list it at all."""
    pid = os.getpid()
    return StatusFile(
        run_id=manifest.run_id,
        name=manifest.name,
        testbed=manifest.testbed,
        host=socket.gethostname(),
        pid=pid,
        pid_start=process_start(pid) or 0,
        state="running",
        started=manifest.started,
        updated=manifest.started,
        done=0,
        total=manifest.planned_total,
        failed=0,
    )


def read_status(run_dir: Path) -> StatusFile | None:
    """The run's status file, or None when there is none or it cannot be read. Bounded (a regular
    file of at most MAX_STATUS_BYTES): every poll of the status views reads every run's file, so
    one 3 GiB status.json must not exhaust a server, nor a FIFO hang it."""
    status = status_or_why(run_dir)
    return status if isinstance(status, StatusFile) else None


def status_or_why(run_dir: Path) -> StatusFile | str | None:
    """read_status's reading, saying why a status file cannot be read ("over 1 MiB", "not valid
    JSON", ...) instead of None: the status views list such a run with that word, where they left
    it out silently (a teammate saw no run at all). None: there is no status file."""
    data = bounded_or_why(RunDir(run_dir).status_json, MAX_STATUS_BYTES, "status.json")
    if not isinstance(data, bytes):
        return data
    try:
        return StatusFile.model_validate_json(data)
    except ValidationError as exc:
        return invalid_words(exc, "an orch status file")


def judge(status: StatusFile, run_status: str) -> LiveState:
    """running: its process is alive and working on it; stale: it says running but its process
    is gone (killed: `orch restore` or `orch resume` it); finished otherwise."""
    if status.state == "finished" and run_status != "running":
        return "finished"
    if not process_alive(status.host, status.pid, status.pid_start):
        return STALE if run_status == "running" else "finished"
    return "running"  # alive, and working or finishing (restore, report)


def state_of(run_status: str, status: StatusFile | None) -> str:
    """The state a list of runs shows for a run: its manifest's status (`run_status`), or `stale`
    when that says running and its controller, named by its status file already read, is gone.
    A run without a readable status file (None) keeps its status: nothing tells whether its
    controller lives. Asked again with the same file, it may answer otherwise: its controller may
    have died since."""
    if run_status != "running" or status is None:
        return run_status
    return STALE if judge(status, run_status) == STALE else run_status
