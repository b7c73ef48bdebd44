"""bench/mutants.py's reading of a mutant's pytest run (no process: subprocess.run is faked)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.benchrun import bench_module

mutants = bench_module("mutants.py")


def _pytest_ended(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        return subprocess.CompletedProcess(cmd, code, b"", b"")

    monkeypatch.setattr(mutants.subprocess, "run", run)


@pytest.mark.parametrize("code", [-15, -9, -1])
def test_pytest_ended_by_a_signal_is_a_killed_mutant(
    monkeypatch: pytest.MonkeyPatch, code: int, tmp_path: Path
) -> None:
    """A mutant of a signal handler (sweep/signals.py's SIGTERM never installed) lets a test's own
    SIGTERM end pytest: the tests noticed, so it is killed, not a crash of the whole run."""
    _pytest_ended(monkeypatch, code)
    assert mutants.run_tests(tmp_path, ["tests/x.py"], 10.0) == "killed"


@pytest.mark.parametrize(("code", "outcome"), [(0, "survived"), (1, "killed"), (2, "killed"), (3, "killed")])
def test_pytest_exit_codes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, code: int, outcome: str) -> None:
    _pytest_ended(monkeypatch, code)
    assert mutants.run_tests(tmp_path, ["tests/x.py"], 10.0) == outcome


@pytest.mark.parametrize("code", [4, 5])
def test_a_usage_error_or_no_tests_is_no_outcome(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, code: int) -> None:
    """4 (usage) and 5 (no tests collected) say the run itself is wrong: never read as a kill."""
    _pytest_ended(monkeypatch, code)
    with pytest.raises(RuntimeError, match=f"pytest exited {code}"):
        mutants.run_tests(tmp_path, ["tests/x.py"], 10.0)


@pytest.mark.parametrize(
    ("tier", "marks"),
    [("unit", "not sim and not testbed and not browser and not process"), ("process", "not testbed and not browser")],
)
def test_the_tier_chooses_which_marked_tests_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tier: str, marks: str
) -> None:
    """--tier process also runs the tests that start local processes: the CLI's schedule and queue
    commands are proven there (systemd-analyze, orch in a subprocess) and nowhere in the unit tier."""
    seen: list[list[str]] = []

    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, b"", b"")

    monkeypatch.setattr(mutants.subprocess, "run", run)
    assert mutants.run_tests(tmp_path, ["tests/x.py"], 10.0, tier=mutants.TIERS[tier]) == "survived"
    assert seen[0][-2:] == ["-m", marks]


def test_the_processes_a_mutants_run_left_are_those_in_or_naming_its_copy(tmp_path: Path) -> None:
    tree = tmp_path / "orch-mutants-x"
    procs = [
        (10, str(tree), "python -m orchestrator.sim.server --role decode"),  # started in the copy
        (11, "/", f"python -I -S -c import reaper_process {tree}/orchestrator/edges 16"),  # names it
        (12, str(tree / "tests"), "sleep 30"),
        (13, str(tmp_path / "orch-mutants-x2"), "sleep 30"),  # another worker's copy: not this one's
        (14, "/work/main", "python -m pytest"),
        (15, str(tree), "python bench/mutants.py"),  # this process
    ]
    assert mutants.strays(tree, procs, me=15) == [10, 11, 12]


@pytest.mark.process
def test_a_process_left_in_the_copy_is_stopped(tmp_path: Path) -> None:
    import os

    left = subprocess.Popen(["sleep", "30"], cwd=tmp_path, start_new_session=True)
    try:
        assert mutants.stop_strays(tmp_path) == 1
        assert left.wait(5) == -9
    finally:
        if left.poll() is None:
            os.kill(left.pid, 9)
            left.wait()


def test_a_mutants_pytest_keeps_its_temporary_files_in_the_copy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """So a server a test starts daemonized (PostgreSQL's data folder in a temporary folder) names
    the copy on its command line, and stop_strays stops it after a timeout's kill."""
    seen: list[dict[str, str]] = []

    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        seen.append(kwargs["env"])  # type: ignore[arg-type]
        return subprocess.CompletedProcess(cmd, 0, b"", b"")

    monkeypatch.setattr(mutants.subprocess, "run", run)
    mutants.run_tests(tmp_path, ["tests/x.py"], 10.0)
    tmp = Path(seen[0]["TMPDIR"])
    assert tmp.is_dir() and tmp.parent == tmp_path and tmp.stat().st_mode & 0o777 == 0o755
    left = (123, "/", f"postgres -D {tmp}/orch-pg-x/data -k {tmp}/orch-pg-x/sock")
    assert mutants.strays(tmp_path, [left], me=1) == [123]
