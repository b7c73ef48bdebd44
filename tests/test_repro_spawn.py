"""run_command's on_spawn: the runner starts the checks that run beside the repro once the repro's
process exists (their threads then never compete with its spawn). The hook runs once, while the
command runs; if it fails, the command's process group is killed and the hook's error propagates."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.core.records import ReproOutcome
from orchestrator.edges.workload import run_command

pytestmark = pytest.mark.process


def _run(tmp_path: Path, command: str, on_spawn: Callable[[], None]) -> ReproOutcome:
    return run_command(
        command,
        timeout_s=30,
        cwd=tmp_path,
        env=None,
        stdout_path=tmp_path / "repro.out",
        stderr_path=tmp_path / "repro.err",
        on_spawn=on_spawn,
    )


def test_on_spawn_runs_once_while_the_command_runs(tmp_path: Path) -> None:
    started = tmp_path / "started"
    seen: list[bool] = []

    def hook() -> None:  # the command waits for this file: it runs while the command does
        seen.append(True)
        started.write_text("go")

    outcome = _run(tmp_path, f"until [ -e {started} ]; do sleep 0.01; done; echo after-hook", hook)
    assert seen == [True]
    assert outcome.exit_code == 0 and outcome.stdout_tail == "after-hook\n"


def test_a_failing_on_spawn_kills_the_command_and_raises(tmp_path: Path) -> None:
    marker = tmp_path / "survived"

    def hook() -> None:
        raise RuntimeError("checks could not start")

    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="checks could not start"):
        _run(tmp_path, f"sleep 1; touch {marker}", hook)
    assert time.monotonic() - t0 < 1
    time.sleep(1.3)
    assert not marker.exists()  # the group was killed, not left to finish
