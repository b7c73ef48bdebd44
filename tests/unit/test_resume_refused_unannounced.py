"""`orch resume RUN` refused before anything is touched (an env file changed since the run
restored it) prints the refusal alone, exit 2: it printed "resuming r1: 4 of 6 trials left" and
then the error, and a user read that the resume had begun (the third new-user walk). A resume
that goes on still announces itself first (on the fakes, in process)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from helpers.inproc import run_main
from helpers.parallel_fakes import Fleet, fake_matrix, install, interrupted_sweep, runner_threads, write_files

from orchestrator.errors import OrchError
from orchestrator.sweep import api
from orchestrator.sweep import runner as runner_mod
from orchestrator.sweep.progress import QuietProgress


def _stopped_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, testbeds: tuple[str, ...] = ("A",)
) -> tuple[Fleet, Path]:
    """A 2x3 sweep Ctrl-C'd in its third trial's repro: hosts restored, 2 of 6 trials done (on
    `testbeds`: a parallel run given more than one)."""
    fleet, outcome, _ = interrupted_sweep(tmp_path, monkeypatch, "refused", testbeds)
    return fleet, outcome.run_dir


def _resume(tmp_path: Path) -> tuple[int, str]:
    said = io.StringIO()  # stdout and stderr as one stream, in order (2>&1)
    code = run_main(["resume", "reports/r1"], tmp_path, {"COLUMNS": "400"}, said, said)
    return code, " ".join(said.getvalue().split())


def test_a_resume_refused_before_anything_is_touched_never_says_resuming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet, _ = _stopped_run(tmp_path, monkeypatch)
    decode = fleet.transports[("A", "decode")]
    decode.files["/etc/orch/decode.env"] = b"D=0\nTEAM=1\n"  # edited by someone since the run restored it
    code, said = _resume(tmp_path)
    assert code == 2, said
    assert said.startswith("error: cannot resume: the env file changed since this run restored it"), said
    assert "resuming r1" not in said, said
    assert decode.files["/etc/orch/decode.env"] == b"D=0\nTEAM=1\n"


def test_a_resume_that_goes_on_announces_itself_before_its_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stopped_run(tmp_path, monkeypatch)
    code, said = _resume(tmp_path)
    assert code == 0, said
    assert "resuming r1: 4 of 6 trials left" in said, said
    assert said.index("resuming r1") < said.index("6 trials completed, 0 failed"), said


def test_a_parallel_resume_refused_on_one_testbed_never_says_resuming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each testbed's runner checks its hosts as it starts; the run is announced once every one of
    them has passed, so testbed B's refusal is said alone, and A's hosts are left as they were."""
    fleet, _ = _stopped_run(tmp_path, monkeypatch, ("A", "B"))
    decode = fleet.transports[("B", "decode")]
    decode.files["/etc/orch/decode.env"] = b"D=0\nTEAM=1\n"
    before = {t: (fleet.file(t, "prefill"), fleet.file(t, "decode")) for t in ("A", "B")}
    seen = {key: len(t.calls) for key, t in fleet.transports.items()}
    code, said = _resume(tmp_path)
    assert code == 2, said
    assert "cannot resume: the env file changed since this run restored it" in said, said
    assert "resuming r1" not in said, said
    assert {t: (fleet.file(t, "prefill"), fleet.file(t, "decode")) for t in ("A", "B")} == before
    # testbed A passed its checks and waited: it went on to no backup, write or restart of its own
    touched = _touched_since(fleet, seen)
    assert not touched, touched


def _touched_since(fleet: Fleet, seen: dict[tuple[str, str], int]) -> list[tuple[tuple[str, str], str, str]]:
    """Every backup, write, restart or stop on any host since `seen` (each transport's call count)."""
    return [
        (key, c.op, c.target)
        for key, t in fleet.transports.items()
        for c in t.calls[seen[key] :]
        if ".orch-lock" not in c.target  # the testbeds' locks: taken and given back by the resume itself
        and (c.op in ("write", "restart", "stop") or (c.op == "run" and c.target.startswith(("cp ", "rm ", "mv "))))
    ]


def test_a_ctrl_c_after_one_testbed_was_refused_still_touches_no_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C pressed while the gate waits, after testbed B's refusal: the gate closes as it does
    without the Ctrl-C (one rule: an error before the gate opens closes it). It opened, and testbed A
    went on to back up its hosts and restore them."""
    fleet, _ = _stopped_run(tmp_path, monkeypatch, ("A", "B"))
    fleet.transports[("B", "decode")].files["/etc/orch/decode.env"] = b"D=0\nTEAM=1\n"

    def ctrl_c_once_b_was_refused(gate: runner_mod._StartGate, finished: Any, errors: Any, start: Any) -> None:
        while not (errors and all(a or f.is_set() for a, f in zip(gate.arrived, finished, strict=True))):
            gate.changed.wait(0.05)
        raise KeyboardInterrupt

    monkeypatch.setattr(runner_mod._StartGate, "open_when_ready", ctrl_c_once_b_was_refused)
    seen = {key: len(t.calls) for key, t in fleet.transports.items()}
    code, said = _resume(tmp_path)
    assert code == 2, said
    assert "cannot resume: the env file changed since this run restored it" in said, said
    assert "resuming r1" not in said, said
    assert not _touched_since(fleet, seen)
    assert not runner_threads()


def test_a_parallel_resume_that_goes_on_announces_itself_once_before_its_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stopped_run(tmp_path, monkeypatch, ("A", "B"))
    code, said = _resume(tmp_path)
    assert code == 0, said
    assert said.count("resuming r1") == 1, said
    assert said.index("resuming r1") < said.index("6 trials completed, 0 failed"), said


class _NoStart(QuietProgress):
    def start(self, total: int, done: int) -> None:
        raise OrchError("status.json: cannot write (disk full)")


def test_a_parallel_run_whose_display_cannot_start_touches_no_host_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The display starts (status.json names the controller) before any runner backs up a host:
    when it cannot, the error is the run's and every runner stops at the gate, its hosts untouched,
    its thread ended (the journal is closed only once no runner uses it)."""
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix("nostart", 1), ["A", "B"])
    req = api.SweepRequest(
        m, i, testbeds=("A", "B"), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True
    )
    with pytest.raises(OrchError, match="disk full"):
        api.run(req, lambda started: _NoStart(), warn=lambda message: None)
    writes = [(key, c.target) for key, t in fleet.transports.items() for c in t.calls if c.op == "write"]
    assert all(".orch-lock" in target for _, target in writes), writes
    assert not any(c.op in ("restart", "stop") for t in fleet.transports.values() for c in t.calls)
    assert not runner_threads()
