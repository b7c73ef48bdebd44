"""How `sweep.api.run` starts a run, as its callers (the CLI, the overnight queue) rely on it: a
run without an id gets one from the time and the matrix's name, the caller learns the run's folder
before it exists, the runs index lists the run as running once it starts, and the progress
factory is told what the run is (its trials, adaptive or not). On the fakes, no process.

Found by mutation testing of sweep/api.py (bench/mutants.py --only run,...): each of these could
be dropped or turned around with the API's own tests passing (the simulator's tests and the queue's
caught some, minutes later).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.parallel_fakes import Fleet, fake_matrix, install, write_files

from orchestrator.sweep import api
from orchestrator.sweep.progress import QuietProgress

ENV = {"prefill": "P=0\n", "decode": "D=0\n"}


def _request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, matrix: str, **kw: object) -> api.SweepRequest:
    install(monkeypatch, Fleet(dict(ENV)))
    m, i = write_files(tmp_path, matrix, ["A"])
    return api.SweepRequest(m, i, testbeds=("A",), reports_dir=tmp_path / "reports", skip_preflight=True, **kw)  # type: ignore[arg-type]


def _quiet(started: api.Started) -> QuietProgress:
    return QuietProgress()


def test_a_run_without_an_id_is_named_by_its_start_time_and_matrix(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    outcome = api.run(_request(tmp_path, monkeypatch, fake_matrix("nightly", 1)), _quiet, warn=lambda message: None)
    assert outcome.run_dir is not None and outcome.run_dir.parent == tmp_path / "reports"
    assert re.fullmatch(r"\d{8}-\d{6}-nightly", outcome.run_id), outcome.run_id
    assert outcome.status == "completed"


def test_the_caller_learns_where_the_run_goes_before_its_folder_exists(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The queue records the folder first: there is no instant the run exists unrecorded."""
    told: list[tuple[Path, bool]] = []
    req = _request(
        tmp_path, monkeypatch, fake_matrix("q", 1), run_id="r1", on_created=lambda d: told.append((d, d.exists()))
    )
    api.run(req, _quiet, warn=lambda message: None)
    assert told == [(tmp_path / "reports" / "r1", False)]


class SeesIndex(QuietProgress):
    """What reports/index.html says of the run when its trials start."""

    def __init__(self, reports: Path) -> None:
        self.reports, self.index = reports, ""

    def start(self, total: int, done: int) -> None:
        self.index = (self.reports / "index.html").read_text()


def test_the_runs_index_lists_the_run_as_running_once_it_starts(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen = SeesIndex(tmp_path / "reports")
    api.run(_request(tmp_path, monkeypatch, fake_matrix("q", 1), run_id="r1"), lambda s: seen, warn=lambda m: None)
    assert 'href="r1/' in seen.index and 'class="badge running"' in seen.index, seen.index[-2000:]


@pytest.mark.parametrize(
    ("extra", "adaptive"),
    [("", False), ("adaptive: {metric: events, effect: 0.10}\n", True)],
    ids=["fixed", "adaptive"],
)
def test_the_progress_factory_is_told_what_the_run_is(tmp_path, monkeypatch, extra: str, adaptive: bool) -> None:  # type: ignore[no-untyped-def]
    told: list[api.Started] = []

    def progress(started: api.Started) -> QuietProgress:
        told.append(started)
        return QuietProgress()

    req = _request(tmp_path, monkeypatch, fake_matrix("q", 3, extra=extra), run_id="r1")
    api.run(req, progress, warn=lambda message: None)
    (started,) = told
    assert (started.run_id, started.testbeds, started.trials, started.left) == ("r1", ("A",), 6, 6)
    assert started.adaptive is adaptive and started.hunt is None and not started.resumed
