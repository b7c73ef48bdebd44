"""A resume marks the run running in run.json once it takes the hosts, with itself in resumed_by.

Found by the tenth new-user walk (real systemd + sshd hosts): a sweep stopped by SIGTERM (hosts
restored, run.json `interrupted`), resumed, and that resume killed with kill -9 left the decode env
file on a cell's flags and the testbed locked, yet `orch status` and the runs index showed the run
`interrupted` (which reads as hosts restored), without the `orch resume`/`orch restore` line a stale
run gets: store.liveness calls a dead controller stale only when run.json says running, and the
resume never said so. `orch restore` then left run.json's `ended` at the first interruption's time
(the report's header said the run ended before its last four trials), and run.json's resumed_by
never named the killed resume (it was written only when a resume finished). On the fakes."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.parallel_fakes import interrupted_sweep

from orchestrator.store.manifest import load_manifest
from orchestrator.sweep import api
from orchestrator.sweep.progress import QuietProgress


class SeesRunJson(QuietProgress):
    """Notes what run.json says when the sweep starts and after each trial."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.seen: list[tuple[str, str | None, int]] = []

    def _look(self) -> None:
        m = load_manifest(self.run_dir, plan=False)
        self.seen.append((m.status, m.ended, len(m.resumed_by)))

    def start(self, total: int, done: int) -> None:
        self._look()

    def trial_done(self, record: object) -> None:
        self._look()


def test_a_resume_of_an_interrupted_run_says_running_in_run_json_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet, outcome, _ = interrupted_sweep(tmp_path, monkeypatch, "mark")
    run_dir = outcome.run_dir
    assert run_dir is not None
    before = load_manifest(run_dir, plan=False)
    assert before.status == "interrupted" and before.ended is not None and before.resumed_by == []
    seen = SeesRunJson(run_dir)
    resumed = api.resume(api.ResumeRequest(run_dir), lambda started: seen, warn=lambda message: None)
    assert resumed.status == "completed"
    # from the start of the resume on: running, no end, this resume recorded (a kill -9 now reads stale)
    assert seen.seen and all(s == ("running", None, 1) for s in seen.seen), seen.seen
    after = load_manifest(run_dir, plan=False)
    assert after.status == "completed" and len(after.resumed_by) == 1  # recorded once, not again at its end
    assert after.ended is not None and after.ended > before.ended
    assert fleet.file("A", "decode") == b"D=0\n"


def test_a_resume_refused_before_it_starts_leaves_run_json_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume that stops while it is announced (before it takes any host) does not mark the run
    running: nothing of it ran, and the run stays interrupted, as its hosts are."""
    _, outcome, _ = interrupted_sweep(tmp_path, monkeypatch, "refused")
    run_dir = outcome.run_dir
    assert run_dir is not None
    before = (run_dir / "run.json").read_bytes()

    def progress(started: api.Started) -> object:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        api.resume(api.ResumeRequest(run_dir), progress, warn=lambda message: None)  # type: ignore[arg-type]
    assert (run_dir / "run.json").read_bytes() == before
