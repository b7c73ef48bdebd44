"""A SIGTERM that lands while a new run writes the runs index stops the sweep.

Found by the kill-point harness (bench/bench_kill_points.py, seed 144): SIGTERM 0.37 s after the
run folder appeared, while reports/index.html was being written (before the backup), and the
sweep ran all 8 trials and exited 0. The index is best effort (a failure to write it is
swallowed), and a SIGTERM arrives as Interrupted, which is an OrchError: it was swallowed with
the failures. Now it goes on up, so the run ends interrupted (exit 130) before a host is touched.
No process is started: the signal's exception is raised by the index writer itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import Interrupted, OrchError
from orchestrator.report import site
from orchestrator.sweep import api


def _index_raising(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    def write_index(*args: object, **kwargs: object) -> None:
        raise exc

    monkeypatch.setattr(site, "write_index", write_index)


def test_a_sigterm_while_the_index_is_written_stops_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _index_raising(monkeypatch, Interrupted("received SIGTERM"))
    with pytest.raises(Interrupted, match="SIGTERM"):
        api._list_running(tmp_path / "run")


def test_an_index_that_cannot_be_written_still_never_stops_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _index_raising(monkeypatch, OrchError("cannot write reports/index.html: disk full"))
    api._list_running(tmp_path / "run")  # no error: the index is a convenience
