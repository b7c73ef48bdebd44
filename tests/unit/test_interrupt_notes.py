"""What an interrupted sweep tells the user while it restores: a second Ctrl-C or SIGTERM skips the
host being restored (both raise in the main thread: sweep.signals). Why: a SIGTERM'd sweep said
"(Ctrl-C again skips the host being restored)", as if only a Ctrl-C could (the fifth new-user walk).
On the fakes (helpers.parallel_fakes), in process."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import Reply
from helpers.notes import Notes
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

from orchestrator.errors import Interrupted
from orchestrator.sweep import api


@pytest.mark.parametrize("signal", [KeyboardInterrupt(), Interrupted("received SIGTERM")], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_sweep_says_a_second_ctrl_c_or_sigterm_skips_a_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signal: BaseException
) -> None:
    fleet = Fleet({"prefill": "P=0\n", "decode": "D=0\n"})
    install(monkeypatch, fleet)
    m, i = write_files(tmp_path, fake_matrix("notes", 1), ["A"])

    def repro(testbed: str, command: str) -> Reply | None:
        raise signal

    fleet.repro_hook = repro
    notes = Notes()
    req = api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp_path / "reports", run_id="r1", skip_preflight=True)
    outcome = api.run(req, lambda started: notes, warn=lambda message: None)
    assert outcome.interrupted and outcome.exit_code == 130
    said = [n for n in notes.lines if n.startswith("interrupted: restoring the hosts")]
    assert said == [
        "interrupted: restoring the hosts before exiting (a second Ctrl-C or SIGTERM skips the host being restored)"
    ], notes.lines
    assert fleet.file("A", "decode") == b"D=0\n"
