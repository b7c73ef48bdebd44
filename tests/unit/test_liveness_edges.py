"""store.liveness, what every view says of a run's controller: the status file a run folder starts
with, the file's shape as /api/status hands it out, and the restore command the views repeat
(mutation round eleven: each test kills a mutant the status views' tests let through)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from helpers.report_synth import synthetic_run
from pydantic import ValidationError

from orchestrator.store import liveness
from orchestrator.store.liveness import (
    MAX_RESTORE_CHARS,
    StatusFile,
    first_status,
    read_status,
    recorded_restore,
)
from orchestrator.store.processes import process_start

RUN = "20261206-210000-liveness"
LEAST = dict(
    run_id=RUN, name="n", testbed="t", host="h", pid=1, pid_start=1, state="running",
    started="2026-12-06T21:00:00+00:00", updated="2026-12-06T21:00:00+00:00", done=0, total=4, failed=0,
)  # fmt: skip


def test_a_new_run_folder_starts_with_nothing_done_or_failed_and_this_process_its_controller() -> None:
    manifest, _ = synthetic_run(replicates=2, failures=False, status="running", run_id=RUN)
    status = first_status(manifest)
    assert (status.done, status.failed, status.total) == (0, 0, manifest.planned_total)
    assert (status.state, status.started, status.updated) == ("running", manifest.started, manifest.started)
    me = os.getpid()
    assert (status.host, status.pid, status.pid_start) == (socket.gethostname(), me, process_start(me))
    assert (status.current_trial, status.current_cell, status.last, status.eta_s) == (None, None, None, None)


def test_the_status_file_states_its_format_version(tmp_path: Path) -> None:
    """/api/status and `orch status --json` hand status.json's fields out: a reader outside orch
    tells formats apart by schema_version, 1 since the file was written."""
    assert json.loads(StatusFile.model_validate(LEAST).model_dump_json())["schema_version"] == 1


def test_fields_a_file_does_not_hold_read_as_null_and_the_current_trial_round_trips(tmp_path: Path) -> None:
    """A status file written before orch kept a field (or a hunt's, with no current cell yet): the
    JSON views say null, as of a run whose trial is unknown, never an empty name."""
    least = StatusFile.model_validate(LEAST)
    assert {k: least.model_dump()[k] for k in ("current_trial", "current_cell", "last")} == dict.fromkeys(
        ("current_trial", "current_cell", "last")
    )
    (tmp_path / "status.json").write_text(json.dumps({**LEAST, "current_trial": 3, "current_cell": "c-3"}))
    read = read_status(tmp_path)
    assert read is not None and (read.current_trial, read.current_cell) == (3, "c-3")


def test_a_status_read_cannot_be_changed_in_place() -> None:
    """Every view reads the same StatusFile (team.livestatus caches them): frozen, so one view
    cannot change what the next one shows."""
    status = StatusFile.model_validate(LEAST)
    with pytest.raises(ValidationError):
        status.done = 3  # type: ignore[misc]


def test_a_recorded_restore_command_is_kept_up_to_the_longest_orch_writes(tmp_path: Path) -> None:
    """Any command orch writes (`orch restore ` and a path of up to PATH_MAX, 4,096 bytes) is kept
    as recorded, up to MAX_RESTORE_CHARS (the views never cut a restore command); a longer one is
    not orch's and the views give orch's own."""
    path_max = "orch restore /" + "r" * 4095
    assert recorded_restore(path_max, tmp_path) == path_max
    longest = "orch restore /" + "r" * (MAX_RESTORE_CHARS - len("orch restore /"))
    assert recorded_restore(longest, tmp_path) == longest
    assert recorded_restore(longest + "r", tmp_path) == liveness.restore_command(tmp_path)
    assert recorded_restore("", tmp_path) == f"orch restore {tmp_path}"


@pytest.mark.parametrize(
    ("file_says", "run_json_says", "alive", "shown"),
    [
        # its trials done (status.json: finished), killed while restoring: run.json still running
        ("finished", "running", False, "stale"),
        ("finished", "running", True, "running"),  # alive: restoring or writing the report
        ("running", "completed", True, "running"),  # run.json written, the controller not yet gone
        ("running", "interrupted", False, "finished"),
        ("finished", "completed", True, "finished"),
    ],
)
def test_a_run_is_finished_only_when_both_files_say_so_or_its_controller_is_gone(
    monkeypatch: pytest.MonkeyPatch, file_says: str, run_json_says: str, alive: bool, shown: str
) -> None:
    """A controller killed during the restore wrote `finished` to status.json (its trials ended)
    but never ended run.json: that run is stale (its hosts perhaps still changed), not finished."""
    monkeypatch.setattr(liveness, "process_alive", lambda host, pid, start: alive)
    status = StatusFile.model_validate({**LEAST, "state": file_says})
    assert liveness.judge(status, run_json_says) == shown


@pytest.mark.parametrize(
    ("run_json_says", "controller", "shown"),
    [
        ("running", "gone", "stale"),
        ("running", "alive", "running"),
        ("running", None, "running"),  # no readable status file: nothing tells whether it lives
        ("completed", "gone", "completed"),
        ("interrupted", None, "interrupted"),
    ],
)
def test_a_list_of_runs_shows_stale_only_for_a_running_run_whose_controller_is_gone(
    monkeypatch: pytest.MonkeyPatch, run_json_says: str, controller: str | None, shown: str
) -> None:
    monkeypatch.setattr(liveness, "process_alive", lambda host, pid, start: controller == "alive")
    status = None if controller is None else StatusFile.model_validate(LEAST)
    assert liveness.state_of(run_json_says, status) == shown
