"""A Ctrl-C or SIGTERM after the runner has restored the hosts, before the run records its end
(the testbed locks' release, the end's counts), still leaves run.json saying the run was
interrupted, with the way to go on; never `running` for good (on the fakes, no process).

Why: `orch status` lists a running run whose controller is gone as `stale`, killed, hosts
perhaps on a cell's flags. The kill-point harness (`bench/bench_kill_points.py --seed 9100`, seed
9113) sent a second Ctrl-C 37 ms after the restore had ended: the run exited 130 with every host
restored, and status called it killed. A run that recorded its end before the interrupt (its
report then cut short) keeps that end.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

from orchestrator.edges.lock import TestbedLock
from orchestrator.errors import Interrupted
from orchestrator.store.manifest import load_manifest
from orchestrator.sweep import api
from orchestrator.sweep.progress import QuietProgress

ENV = {"prefill": "P=0\n", "decode": "D=0\n"}
SIGTERM = "received SIGTERM"


def _once(monkeypatch: pytest.MonkeyPatch, owner: object, name: str, exc: BaseException, *, skip: int = 0) -> None:
    """`owner.name` raises `exc` on its call number skip + 1, then behaves as before."""
    real = getattr(owner, name)
    calls = [0]

    def patched(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        if calls[0] == skip + 1:
            raise exc
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, patched)


def _request(tmp_path: Path, fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> api.SweepRequest:
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix("end", 1), ["A"])
    return api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True)


def _quiet(started: api.Started) -> QuietProgress:
    return QuietProgress()


def _assert_ended_interrupted(run_dir: Path, stopped: BaseException, fleet: Fleet) -> None:
    manifest = load_manifest(run_dir, plan=False)
    assert manifest.status == "interrupted" and manifest.ended
    assert getattr(stopped, "__notes__", []) == [
        f"resume with: orch resume {run_dir} (or put the hosts back with: orch restore {run_dir})"
    ]
    assert fleet.file("A", "decode") == b"D=0\n"  # the runner had restored it


# where the interrupt lands: the API's release of the testbed lock (the runner's own passes), or
# the end's counts, before _finish records the end
WHERE = {"lock-release": (TestbedLock, "release", 1), "end-counts": (api, "_final_counts", 0)}


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("signal", ["ctrl-c", "sigterm"])
def test_an_interrupt_after_the_runner_before_the_end_is_recorded_ends_the_run_as_interrupted(  # type: ignore[no-untyped-def]
    tmp_path, monkeypatch, signal, where
) -> None:
    error = KeyboardInterrupt() if signal == "ctrl-c" else Interrupted(SIGTERM)  # a new one: notes go on it
    fleet = Fleet(dict(ENV))
    req = _request(tmp_path, fleet, monkeypatch)
    owner, name, skip = WHERE[where]
    _once(monkeypatch, owner, name, error, skip=skip)
    with pytest.raises(type(error)) as stopped:
        api.run(req, _quiet, warn=lambda message: None)  # type: ignore[arg-type]
    _assert_ended_interrupted(tmp_path / "reports" / "r1", stopped.value, fleet)


def test_a_resume_interrupted_before_its_end_is_recorded_ends_interrupted_not_running(  # type: ignore[no-untyped-def]
    tmp_path, monkeypatch
) -> None:
    """A resume marks the run running as it starts (sweep.runrecord.RunningMark): an interrupt
    after its runner, before its end, left that mark for good."""
    fleet = Fleet(dict(ENV))
    req = _request(tmp_path, fleet, monkeypatch)
    _once(monkeypatch, api, "_final_counts", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        api.run(req, _quiet, warn=lambda message: None)  # type: ignore[arg-type]
    run_dir = tmp_path / "reports" / "r1"
    _once(monkeypatch, api, "_final_counts", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt) as stopped:
        api.resume(api.ResumeRequest(run_dir), _quiet, warn=lambda message: None)  # type: ignore[arg-type]
    _assert_ended_interrupted(run_dir, stopped.value, fleet)
    assert len(load_manifest(run_dir, plan=False).resumed_by) == 1  # the resume's own mark, kept


def test_a_run_that_recorded_its_end_keeps_it_when_its_report_is_cut_short(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fleet = Fleet(dict(ENV))
    req = _request(tmp_path, fleet, monkeypatch)
    _once(monkeypatch, api, "_write_report", KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt) as stopped:
        api.run(req, _quiet, warn=lambda message: None)  # type: ignore[arg-type]
    assert load_manifest(tmp_path / "reports" / "r1", plan=False).status == "completed"
    assert getattr(stopped.value, "__notes__", []) == []  # nothing to resume


def test_an_interrupt_before_the_run_exists_leaves_no_run_and_names_no_way_back(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C while the caller records where the run will be (the queue's on_created), before its
    folder is made: nothing to end, resume or restore, so no run.json is written and no way back
    is named for a folder that does not exist."""
    fleet = Fleet(dict(ENV))
    req = _request(tmp_path, fleet, monkeypatch)

    def created(run_dir: Path) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as stopped:
        api.run(dataclasses.replace(req, on_created=created), _quiet, warn=lambda message: None)  # type: ignore[arg-type]
    assert not (tmp_path / "reports" / "r1").exists()
    assert getattr(stopped.value, "__notes__", []) == []
    assert fleet.file("A", "decode") == b"D=0\n"


def test_an_interrupt_out_of_the_runner_goes_up_with_the_run_ended_as_interrupted(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Past the runner's own handler (its restore done) an interrupt is the command's end: it goes
    up (exit 130 by the CLI), with run.json saying interrupted; it is never made into an outcome
    as if the run had stopped before its runner began."""
    fleet = Fleet(dict(ENV))
    req = _request(tmp_path, fleet, monkeypatch)
    real = api.execute

    def execute_then_ctrl_c(*args: object, **kwargs: object) -> object:
        real(*args, **kwargs)  # type: ignore[arg-type]
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "execute", execute_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt) as stopped:
        api.run(req, _quiet, warn=lambda message: None)  # type: ignore[arg-type]
    _assert_ended_interrupted(tmp_path / "reports" / "r1", stopped.value, fleet)
