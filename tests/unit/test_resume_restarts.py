"""`orch resume` restarts no unit on a host the matrix never edits (found by the model-checked
random sweeps, tests/helpers/modelsweep.py: every interrupted-then-resumed seed restarted them).

Resume adopts the run's backup and, not knowing what the earlier process left each unit running
on, took every unit of every host as maybe stale; the resumed run's restore then restarted the
units of hosts whose env file no trial ever writes (a model reload each, minutes on real
hardware). Their file is only ever the original (a drifted one is still caught at the restore)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import Reply
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

from orchestrator.errors import TransportError
from orchestrator.sweep import api
from orchestrator.sweep.progress import QuietProgress


def _quiet(started: api.Started) -> QuietProgress:
    return QuietProgress()


def test_a_resumed_run_restarts_no_unit_of_a_host_it_never_edits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})  # the matrix edits decode only
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix("resume", 2), ["A"])
    calls = []

    def repro(testbed: str, command: str) -> Reply | None:
        calls.append(command)
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C during the second trial's workload
        return None

    fleet.repro_hook = repro
    req = api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True)
    outcome = api.run(req, _quiet, warn=lambda message: None)
    assert outcome.interrupted and fleet.file("A", "decode") == b"D=0\n"
    resumed = api.resume(api.ResumeRequest(outcome.run_dir), _quiet, warn=lambda message: None)
    assert resumed.status == "completed" and resumed.completed == 4
    assert fleet.file("A", "prefill") == b"P=0\n" and fleet.file("A", "decode") == b"D=0\n"
    assert fleet.managers[("A", "prefill")].restarts() == []  # never edited: never restarted
    assert fleet.managers[("A", "decode")].restarts() != []


def test_orch_restore_restarts_no_unit_of_a_host_the_run_never_edits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's own restore cannot reach prefill (its connection drops at the first read), so the
    run ends with prefill not restored; `orch restore` then puts it back without restarting its unit,
    whose file no trial wrote (seed 16 of the random sweeps, made small)."""
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix("restore", 1), ["A"])
    calls = []

    def repro(testbed: str, command: str) -> Reply | None:
        calls.append(command)
        if len(calls) == 2:  # the last trial's workload: prefill's next read is the restore's
            t = fleet.transports[("A", "prefill")]
            read = t.read_entry

            def dropped(path: str) -> object:
                t.read_entry = read  # type: ignore[method-assign]
                raise TransportError(t.host, "connection lost: Broken pipe")

            t.read_entry = dropped  # type: ignore[method-assign]
        return None

    fleet.repro_hook = repro
    req = api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True)
    outcome = api.run(req, _quiet, warn=lambda message: None)
    assert outcome.not_restored == ("prefill",) and fleet.extra_files("A", "prefill") != []
    restored = api.restore(api.RestoreRequest(outcome.run_dir), QuietProgress(), warn=lambda message: None)
    assert [tb.not_restored for tb in restored.testbeds] == [()]
    assert fleet.file("A", "prefill") == b"P=0\n" and fleet.extra_files("A", "prefill") == []
    assert fleet.managers[("A", "prefill")].restarts() == []  # never edited: never restarted
