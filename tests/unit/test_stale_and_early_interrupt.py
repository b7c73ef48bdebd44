"""A dead run's stale lock names that run's folder and says to resume or restore it first
(--break-lock only as a last resort); a run interrupted before its first trial ends as
interrupted in run.json, with the resume hint (on the fakes, no process, no socket)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from fakes import FakeUnit, Role, make_bed
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

from orchestrator.cli import output
from orchestrator.edges.lock import LockInfo, TestbedLock, lock_path
from orchestrator.errors import Interrupted, LockError
from orchestrator.store.manifest import load_manifest
from orchestrator.sweep import api
from orchestrator.sweep.progress import QuietProgress

DEAD_PID = 4_194_305  # above the largest pid_max Linux allows (2^22): never a live process
MATRIX = fake_matrix("early", 1)


def _bed():  # type: ignore[no-untyped-def]
    return make_bed({"decode": Role("X=0\n", [FakeUnit("decode-server", active=True)])})


def _dead_lock(bed, run_dir: str) -> None:  # type: ignore[no-untyped-def]
    handle = bed.deployment.hosts["decode"]
    info = LockInfo("k9", "ann", DEAD_PID, socket.gethostname(), "2026-12-02T01:00:00", "", run_dir)
    bed.transports["decode"].files[lock_path(handle, "")] = (json.dumps(info.__dict__) + "\n").encode()


def test_a_stale_lock_names_the_dead_runs_folder_and_says_resume_or_restore_first() -> None:
    bed = _bed()
    _dead_lock(bed, "reports/k9b")
    with pytest.raises(LockError) as err:
        TestbedLock.for_run(bed.deployment, "next", "now", run_dir=Path("reports/next")).acquire()
    text = str(err.value)
    assert "that process is gone (stale lock); rerun with --break-lock to take it" in text
    assert "orch resume reports/k9b" in text and "orch restore reports/k9b" in text
    assert "last resort" in text and "changes in place" in text


def test_a_lock_without_its_run_dir_guesses_it_beside_this_run(tmp_path: Path) -> None:
    bed = _bed()
    _dead_lock(bed, "")
    (tmp_path / "k9").mkdir()
    (tmp_path / "k9" / "run.json").write_text("{}")
    with pytest.raises(LockError, match=f"orch restore {tmp_path / 'k9'}"):
        TestbedLock.for_run(bed.deployment, "next", "now", run_dir=tmp_path / "next").check()
    (tmp_path / "k9" / "run.json").unlink()  # no such run there: the placeholder, never a wrong folder
    with pytest.raises(LockError, match=r"orch resume RUN_DIR \(the run directory of run k9\)"):
        TestbedLock.for_run(bed.deployment, "next", "now", run_dir=tmp_path / "next").check()


def test_the_lock_records_the_run_dir() -> None:
    bed = _bed()
    lock = TestbedLock.for_run(bed.deployment, "r1", "now", run_dir=Path("reports/r1"))
    lock.acquire()
    handle = bed.deployment.hosts["decode"]
    assert json.loads(bed.transports["decode"].files[lock_path(handle, "")])["run_dir"] == "reports/r1"
    lock.release()


@pytest.mark.parametrize("error", [KeyboardInterrupt, Interrupted])
def test_an_interrupt_before_the_first_trial_ends_the_run_as_interrupted(tmp_path, monkeypatch, capsys, error) -> None:  # type: ignore[no-untyped-def]
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, MATRIX, ["A"])

    def progress(started: api.Started) -> object:  # Ctrl-C while the run is announced
        raise error("interrupted by the user or a signal")

    req = api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True)
    outcome = api.run(req, progress, warn=lambda message: None)  # type: ignore[arg-type]
    run_dir = tmp_path / "reports" / "r1"
    assert outcome.interrupted and outcome.exit_code == 130 and outcome.report_error is None
    assert outcome.stopped is None  # no error stopped it: the terminal prints none
    index = (tmp_path / "reports" / "index.html").read_text()  # listed as it ended, not as running
    assert 'class="badge interrupted">interrupted' in index and 'class="badge running"' not in index
    assert load_manifest(run_dir, plan=False).status == "interrupted"
    assert fleet.file("A", "decode") == b"D=0\n" and fleet.extra_files("A", "decode") == []  # lock released
    output.show_outcome(outcome)
    shown = capsys.readouterr()
    assert f"resume with: orch resume {run_dir}" in shown.out and "error:" not in shown.err
    resumed = api.resume(api.ResumeRequest(run_dir), lambda started: QuietProgress(), warn=lambda message: None)
    assert resumed.status == "completed" and resumed.completed == 2  # the lock was released, the run goes on


@pytest.mark.parametrize("error", [KeyboardInterrupt, Interrupted])
def test_a_resume_interrupted_before_it_takes_the_hosts_says_they_are_as_the_run_left_them(  # type: ignore[no-untyped-def]
    tmp_path, monkeypatch, error
) -> None:
    """A run whose last trials were lost (its journal cut after one), then `orch resume` stopped
    while it is announced, before it locks or touches a testbed: the interrupt goes up with a note
    that this resume changed nothing and the two ways back, with the run's folder (it said only
    "interrupted", found by the kill-point harness's --kill-way-back resume)."""
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix("cut", 2), ["A"])
    req = api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True)
    run_dir = api.run(req, lambda started: QuietProgress(), warn=lambda message: None).run_dir  # type: ignore[arg-type,return-value]
    journal = run_dir / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    first = next(n for n, line in enumerate(lines) if '"type":"trial"' in line.replace(" ", ""))
    journal.write_text("".join(lines[: first + 1]))
    files_before = {k: dict(t.files) for k, t in fleet.transports.items()}

    def progress(started: api.Started) -> object:
        raise error("interrupted by the user or a signal")

    with pytest.raises(error) as stopped:
        api.resume(api.ResumeRequest(run_dir), progress, warn=lambda message: None)  # type: ignore[arg-type]
    notes = getattr(stopped.value, "__notes__", [])
    assert notes == [
        "this resume stopped before its first trial: it edited no env file, and the hosts are as the "
        f"interrupted run left them; resume with: orch resume {run_dir} (or put the hosts back with: "
        f"orch restore {run_dir})"
    ]
    assert {k: dict(t.files) for k, t in fleet.transports.items()} == files_before
