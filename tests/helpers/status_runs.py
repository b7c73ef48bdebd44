"""Run folders as the status views find them (a manifest, a status file or a damaged one), and
controllers the tests call dead without killing a process: what tests/team/test_status_cache.py,
test_unreadable_manifest.py, unit/test_status_from_the_start.py and unit/test_live_status_counts.py
build their folders with."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from helpers.report_synth import synthetic_run
from orchestrator.core.records import TrialRecord
from orchestrator.store.atomic import write_json_atomic
from orchestrator.store.liveness import StatusFile
from orchestrator.store.manifest import save_manifest
from orchestrator.store.stamps import SETTLE_NS
from orchestrator.sweep.session import create_run_dir
from orchestrator.team.livestatus import StatusCache
from orchestrator.team.queue import Claimer

ME = Claimer.current()
DEAD_PID = 999_999  # the controllers the tests kill (process_alive faked: no process started)


def started_run(reports: Path, run_id: str, *, hunt: bool = False) -> tuple[Path, list[TrialRecord]]:
    """A run folder as `orch run` makes it before its first trial (run.json running, its plan, its
    first status.json: session.create_run_dir), and the 16 trial records its synthetic run holds."""
    manifest, records = synthetic_run(replicates=2, failures=False, status="running", run_id=run_id)
    run_dir = reports / run_id
    create_run_dir(run_dir, manifest.model_copy(update={"ended": None, "hunt": hunt}))
    return run_dir, list(records)


def settled_cache() -> StatusCache:
    """A cache whose clock is past SETTLE_NS of files written now (as a past night's runs are)."""
    return StatusCache(lambda: time.time_ns() + SETTLE_NS + 1)


def status(run_id: str, state: str = "finished", pid: int = ME.pid, **kw: object) -> StatusFile:
    base: dict[str, object] = dict(
        run_id=run_id, name=f"name-{run_id}", testbed="t", host=ME.host, pid=pid, pid_start=ME.start, state=state,
        started=f"2026-01-01T00:00:{len(run_id):02d}+00:00", updated=f"2026-01-02T00:00:{len(run_id):02d}+00:00",
        done=1, total=2, failed=0,
    )  # fmt: skip
    return StatusFile.model_validate({**base, **kw})


def run(reports: Path, name: str, run_status: str, st: StatusFile | str | None) -> Path:
    """reports/name with a run.json saying `run_status` and `st` as its status.json (text: as
    written; None: none)."""
    manifest, _ = synthetic_run(replicates=1, failures=False, run_id=name)
    d = reports / name
    d.mkdir(parents=True)
    save_manifest(d, manifest.model_copy(update={"status": run_status}))
    if isinstance(st, StatusFile):
        write_json_atomic(d / "status.json", st)
    elif st is not None:
        (d / "status.json").write_text(st)
    return d


def fake_dead(monkeypatch: pytest.MonkeyPatch) -> set[int]:
    """pids whose controller is gone (store.liveness asks process_alive; no process is started)."""
    gone = {DEAD_PID}
    monkeypatch.setattr("orchestrator.store.liveness.process_alive", lambda host, pid, start: pid not in gone)
    return gone
